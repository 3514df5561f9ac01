"""GET /playbooks answers with an ETag and honours If-None-Match (304, empty body); the
observation middleware still records every call, a 304 as a success.

The entries here are outside any holdout experiment (``holdout_share`` 0: every key is served
every entry); tests/integration/test_playbook_arms.py splits them by arms with this fixture."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from opslake.models import QueuedOp

from ..conftest import api_event
from .conftest import BUCKET, Aws

pytestmark = pytest.mark.integration

Answer = tuple[int, dict[str, str], str]


def _entry(entry_id: str, confidence: float, **fields: Any) -> dict[str, Any]:
    return {
        "entry_id": entry_id, "trigger": f"before {entry_id}", "action": "filter on dt first", "kind": "do",
        "confidence": confidence, "domain": "sql", "status": "active", "endpoint": "/sql",
        "evidence_op_ids": ["op-1", "op-2", "op-3"], "created_at": "2026-11-20T10:00:00Z",
        "holdout_share": 0.0, **fields,
    }  # fmt: skip


SNAPSHOT = {"generated_at": "2026-11-21T10:00:00Z", "entries": [_entry("a", 0.9), _entry("b", 0.5)]}


def _put(aws: Aws, snapshot: dict[str, Any]) -> None:
    aws.s3.put_object(Bucket=BUCKET, Key="playbooks/current.json", Body=json.dumps(snapshot).encode())


@pytest.fixture
def playbooks(
    aws: Aws, load_handler: Callable[..., ModuleType], lambda_context: Any
) -> tuple[ModuleType, Callable[..., Answer]]:
    module = load_handler("functions/gateway/playbooks.py", **aws.env())

    def get(
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        *,
        key_id: str | None = None,
    ) -> Answer:
        event = api_event("GET", "/playbooks", None, key_id=key_id or aws.key_id)
        event["queryStringParameters"] = query
        event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()} if query else None
        event["headers"] = {**(event.get("headers") or {}), **(headers or {})}
        event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
        answer = module.handler(event, lambda_context)
        merged = {k.lower(): v for k, v in (answer.get("headers") or {}).items()}
        merged.update({k.lower(): v[-1] for k, v in (answer.get("multiValueHeaders") or {}).items()})
        return answer["statusCode"], merged, answer.get("body") or ""

    return module, get


def _records(aws: Aws) -> list[QueuedOp]:
    return [QueuedOp.model_validate_json(m["Body"]) for m in aws.receive_all()]


def test_etag_and_304_when_unchanged(aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]]) -> None:
    _put(aws, SNAPSHOT)
    _, get = playbooks
    status, headers, body = get()
    assert status == 200 and [e["entry_id"] for e in json.loads(body)["entries"]] == ["a", "b"]
    etag = headers["etag"]
    assert etag.startswith('"') and etag.endswith('"') and len(etag) > 10
    assert get()[1]["etag"] == etag  # stable for the same snapshot and query

    status, headers, body = get(headers={"If-None-Match": etag})
    assert (status, body, headers["etag"]) == (304, "", etag)
    assert get(headers={"if-none-match": f'"other", W/{etag}'})[0] == 304  # lists and weak tags
    assert get(headers={"If-None-Match": "*"})[0] == 304
    assert get(headers={"If-None-Match": '"stale"'})[0] == 200

    ops = _records(aws)
    assert len(ops) == 6  # every call observed, 304s included
    not_modified = [op for op in ops if op.attributes.get("http_status") == "304"]
    assert len(not_modified) == 3
    assert all(op.success and op.error_type is None for op in ops)
    assert not_modified[0].output_summary == "not modified (2 entries)"
    assert not_modified[0].attributes["not_modified"] == "true"
    # which entries each key was served and withheld: the consolidator compares the arms
    assert {op.attributes["entry_ids"] for op in ops} == {"a,b"}
    assert {(op.attributes["withheld_ids"], op.attributes["holdout"]) for op in ops} == {("", "1")}
    assert {op.reporter_id for op in ops} == {aws.key_name}
    # the body depends on the key's arms: no shared cache may keep it for another key
    assert headers["cache-control"] == "private, no-cache" and headers["vary"] == "Accept"


def test_etag_depends_on_query_and_snapshot(
    aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]]
) -> None:
    _put(aws, SNAPSHOT)
    module, get = playbooks
    etag = get()[1]["etag"]
    limited = get({"limit": "1"})[1]["etag"]
    assert limited != etag
    assert get({"limit": "1"}, {"If-None-Match": etag})[0] == 200  # another selection, another tag

    _put(aws, {**SNAPSHOT, "entries": [_entry("a", 0.95)]})  # the consolidator replaced the snapshot
    module.snapshot._ttl_s = 0
    status, headers, body = get(headers={"If-None-Match": etag})
    assert status == 200 and headers["etag"] != etag
    assert [e["confidence"] for e in json.loads(body)["entries"]] == [0.95]


def test_etag_without_a_snapshot(aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]]) -> None:
    _, get = playbooks
    status, headers, body = get()
    assert status == 200 and json.loads(body) == {"entries": [], "generated_at": None}
    assert get(headers={"If-None-Match": headers["etag"]})[:3:2] == (304, "")


# ---- Markdown (issue 16: the same content servable as Markdown) ------------------------------------
MARKDOWN = "text/markdown; charset=utf-8"


def test_format_md_serves_the_same_selection_as_markdown(
    aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]]
) -> None:
    _put(aws, SNAPSHOT)
    _, get = playbooks
    status, json_headers, _ = get()
    assert status == 200 and json_headers["content-type"] == "application/json"
    assert json_headers["vary"] == "Accept"  # the answer depends on Accept: caches must key on it

    status, headers, text = get({"format": "md"})
    assert status == 200 and headers["content-type"] == MARKDOWN and headers["vary"] == "Accept"
    assert text.startswith("# Playbook entries (generated 2026-11-21T10:00:00+00:00)\n")
    assert "## `/sql`" in text and "### When before a" in text and "- **Do** filter on dt first" in text
    assert text.index("`a`") < text.index("`b`")  # the same order: most confident first
    assert "evidence 3 ops" in text
    etag = headers["etag"]
    assert etag != json_headers["etag"]  # an ETag of the Markdown body itself
    assert get({"format": "md", "limit": "1"})[2].count("- **Do**") == 1  # the same selection

    status, headers, text = get({"format": "md"}, {"If-None-Match": etag})
    assert (status, text, headers["etag"], headers["vary"]) == (304, "", etag, "Accept")
    assert get({"format": "md"}, {"If-None-Match": json_headers["etag"]})[0] == 200

    ops = _records(aws)
    assert [op.attributes["format"] for op in ops] == ["json", "md", "md", "md", "md"]
    assert {op.attributes["entry_ids"] for op in ops} == {"a,b", "a"}
    assert ops[3].attributes["not_modified"] == "true" and ops[3].attributes["entry_ids"] == "a,b"


@pytest.mark.parametrize(
    ("accept", "query", "expected"),
    [
        ("text/markdown", None, "md"),
        ("application/json;q=0.5, text/markdown", None, "md"),
        ("text/*", None, "md"),
        ("text/markdown, application/json", None, "json"),  # a tie: JSON, the default
        ("application/json", None, "json"),
        ("*/*", None, "json"),
        ("text/markdown;q=0, */*", None, "json"),
        ("image/png", None, "json"),  # nothing acceptable: still JSON, never a 406
        ("text/markdown;q=bad", None, "json"),
        ("text/markdown", {"format": "json"}, "json"),  # ?format= wins over Accept
        ("application/json", {"format": "md"}, "md"),
    ],
)
def test_accept_negotiation(
    aws: Aws,
    playbooks: tuple[ModuleType, Callable[..., Answer]],
    accept: str,
    query: dict[str, str] | None,
    expected: str,
) -> None:
    _put(aws, SNAPSHOT)
    _, get = playbooks
    status, headers, body = get(query, {"Accept": accept})
    assert status == 200
    assert headers["content-type"] == (MARKDOWN if expected == "md" else "application/json")
    assert body.startswith("# Playbook entries") if expected == "md" else json.loads(body)["entries"]
    assert _records(aws)[0].attributes["format"] == expected


def test_an_unknown_format_is_a_400(aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]]) -> None:
    _put(aws, SNAPSHOT)
    status, _, body = playbooks[1]({"format": "xml"})
    assert status == 400 and "format" in json.loads(body)["message"]


def test_markdown_escapes_agent_written_text(
    aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]]
) -> None:
    hostile = _entry(
        "h", 0.9, trigger="see [docs](https://evil.example)", action="<img src=x onerror=alert(1)>"
    )
    _put(aws, {**SNAPSHOT, "entries": [hostile]})
    _, _, text = playbooks[1]({"format": "md"})
    assert "\\[docs\\](https://evil.example)" in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "<img" not in text and "[docs](" not in text


def test_markdown_without_a_snapshot(aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]]) -> None:
    status, headers, text = playbooks[1]({"format": "md"})
    assert status == 200 and headers["content-type"] == MARKDOWN
    assert text == "# Playbook entries (generated never: no snapshot yet)\n\nNo active playbook entries.\n"
    assert playbooks[1]({"format": "md"}, {"If-None-Match": headers["etag"]})[0] == 304
