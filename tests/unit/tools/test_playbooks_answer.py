"""GET /playbooks' answer as plain logic (opslake.tools.playbooks): format negotiation, the ETag and
If-None-Match, and one reader's answer split by its holdout arms, with what its op record says.
The handler over it is tested in tests/integration/test_playbooks_etag.py and test_playbook_arms.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from opslake.models.playbooks import HOLDOUT_SALT, PlaybookEntry, PlaybookSnapshot, arm_of
from opslake.models.tools import PlaybooksQuery
from opslake.tools.playbooks import (
    JSON,
    MARKDOWN,
    etag_matches,
    etag_of,
    media_q,
    playbooks_answer,
    wants_markdown,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 23, 1, 0, tzinfo=UTC)


def entry(entry_id: str, **fields: Any) -> PlaybookEntry:
    values: dict[str, Any] = {
        "trigger": "SQL over workers", "action": "Use the column hourly_rate of workers", "kind": "do",
        "confidence": 0.8, "domain": "sql", "endpoint": "/sql", "status": "active", "created_at": NOW, **fields,
    }  # fmt: skip
    return PlaybookEntry(entry_id=entry_id, **values)


def test_etag_is_strong_and_if_none_match_takes_lists_weak_tags_and_star() -> None:
    tag = etag_of("body")
    assert tag.startswith('"') and tag.endswith('"') and tag != etag_of("body!")
    assert etag_matches(tag, tag) and etag_matches(f'"other", W/{tag}', tag) and etag_matches("*", tag)
    assert not etag_matches(None, tag) and not etag_matches("", tag) and not etag_matches('"other"', tag)


@pytest.mark.parametrize(
    ("accept", "media", "q"),
    [
        ("text/markdown", "text/markdown", 1.0),
        ("text/*;q=0.4, */*;q=0.1", "text/markdown", 0.4),  # the most specific range wins
        ("*/*;q=0.2", "application/json", 0.2),
        ("text/html", "application/json", 0.0),
        ("text/markdown;q=bad", "text/markdown", 0.0),
        ("text/markdown;q=7", "text/markdown", 1.0),  # clamped
    ],
)
def test_media_q_is_the_quality_of_the_most_specific_range(accept: str, media: str, q: float) -> None:
    assert media_q(accept, media) == q


def test_the_query_s_format_decides_else_accept_must_prefer_markdown() -> None:
    assert wants_markdown("md", "application/json") and not wants_markdown("json", "text/markdown")
    assert wants_markdown(None, "text/markdown, application/json;q=0.5")
    assert not wants_markdown(None, "text/markdown, application/json")  # a tie is JSON
    assert not wants_markdown(None, None) and not wants_markdown(None, "*/*")


def test_the_answer_splits_the_selection_by_the_reader_s_arms_and_records_both() -> None:
    entries = [entry(f"pb_{i}", confidence=0.5 + i / 100) for i in range(12)]
    current = PlaybookSnapshot(generated_at=NOW, entries=entries)
    answer = playbooks_answer(current, PlaybooksQuery(limit=50), reader="key-a")
    served = [e.entry_id for e in entries if arm_of("key-a", e, HOLDOUT_SALT) == "treatment"]
    withheld = [e.entry_id for e in entries if e.entry_id not in served]
    assert served and withheld  # the example needs both arms
    body = json.loads(answer.body)
    assert sorted(e["entry_id"] for e in body["entries"]) == sorted(served)
    assert body["generated_at"] == NOW.isoformat()
    assert sorted(str(answer.recorded["entry_ids"]).split(",")) == sorted(served)
    assert sorted(str(answer.recorded["withheld_ids"]).split(",")) == sorted(withheld)
    assert answer.recorded["holdout"] == "1" and "ids_cut" not in answer.recorded
    assert answer.summary == f"{len(served)} entries" and answer.etag == etag_of(answer.body)
    assert (answer.format, answer.content_type) == ("json", JSON)
    assert answer.headers == {"ETag": answer.etag, "Cache-Control": "private, no-cache", "Vary": "Accept"}
    # another reader's arms give another body, hence another ETag
    other = playbooks_answer(current, PlaybooksQuery(limit=50), reader="key-b")
    assert other.body != answer.body and other.etag != answer.etag


def test_markdown_and_no_snapshot_yet() -> None:
    current = PlaybookSnapshot(generated_at=NOW, entries=[entry("pb_1")])
    reader = next(r for r in (f"key-{i}" for i in range(100)) if arm_of(r, entry("pb_1"), "s") == "treatment")
    md = playbooks_answer(current, PlaybooksQuery(), reader=reader, accept="text/markdown", salt="s")
    assert (md.format, md.content_type) == ("md", MARKDOWN)
    assert (
        md.body.startswith(f"# Playbook entries (generated {NOW.isoformat()})") and "hourly_rate" in md.body
    )
    empty = playbooks_answer(None, PlaybooksQuery(format="md"), reader="key-a")
    assert empty.body.startswith("# Playbook entries (generated never: no snapshot yet)")
    assert empty.summary == "0 entries (no snapshot yet)" and empty.recorded["entry_ids"] == ""
    assert json.loads(playbooks_answer(None, PlaybooksQuery(), reader="key-a").body) == {
        "entries": [],
        "generated_at": None,
    }
