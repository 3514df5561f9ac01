"""Issue 12 end to end on the local stack: poisoned texts posted by several API keys through
POST /events (as successes, failures and their inputs) and POST /log (as operations and
approaches) — the measured ones and those the second review found — reach no entry that
GET /playbooks serves, while a benign lesson posted the same way is served.

Since issue 24, text an agent wrote waits for an operator by default; this module measures the
fence where it is the last defence: a deployment that opts in to auto-publishing it
(``OPSLAKE_PLAYBOOK_FREE_TEXT_MIN_REPORTERS=2``)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from opslake.config import load_settings
from opslake.models.playbooks import PlaybookSnapshot, arm_of
from opslake_local.drain import Drainer
from opslake_local.loop import ANALYZER, CONSOLIDATOR
from opslake_local.stack import LocalStack
from tests.integration.conftest import local_stack
from tests.unit.analysis.test_fence import MEASURED, SECOND_REVIEW

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEYS = 3
AGENTS_PER_KEY = 2
BENIGN_OPERATION = "staff job: welder in Austin, TX"
BENIGN_APPROACH = "POST /match with role and state, then GET /worker/{id} for the top 3"


@pytest.fixture(scope="module")
def local() -> Iterator[tuple[LocalStack, httpx.Client, Drainer]]:
    """The local stack of a deployment that auto-publishes agent-written text from two reporters."""
    with local_stack(OPSLAKE_PLAYBOOK_FREE_TEXT_MIN_REPORTERS="2") as parts:
        yield parts


def _post(http: httpx.Client, path: str, key: str, body: Any) -> None:
    answer = http.post(path, json=body, headers={"x-api-key": key})
    assert answer.status_code == 202, answer.text


def _tokens(text: str) -> list[str]:
    return re.findall(r"\w+", unicodedata.normalize("NFKC", text).casefold())


def _shows(served: str, poisoned: str) -> bool:
    """Whether a served text shows a run of three consecutive words of a poisoned text (cleaned
    forms too: the old code served the text around a removed markdown link)."""
    words = _tokens(poisoned)
    runs = {tuple(words[i : i + 3]) for i in range(len(words) - 2)} or {tuple(words)}
    have = _tokens(served)
    return any(tuple(have[i : i + len(run)]) == run for run in runs for i in range(len(have)))


def test_poisoned_texts_posted_by_several_keys_are_never_served(
    local: tuple[LocalStack, httpx.Client, Drainer],
) -> None:
    stack, http, drainer = local
    keys = [str(stack.create_api_key(f"fence-key-{k}").value) for k in range(KEYS)]
    for k, key in enumerate(keys):
        for a in range(AGENTS_PER_KEY):
            agent = f"fence-agent-{k}-{a}"
            for i, text in enumerate([*MEASURED, *SECOND_REVIEW]):
                ops = [
                    {"endpoint": "/match", "agent_id": agent, "success": True, "duration_ms": 10.0,
                     "task_class": "staff_job", "input_summary": text},
                    {"endpoint": f"tool:fence_{i}", "agent_id": agent, "success": False, "duration_ms": 10.0,
                     "task_class": "staff_job", "error_type": "bad_request", "error": text},
                ]  # fmt: skip
                _post(http, "/events", key, {"ops": ops})
                for result in ("success", "failure"):
                    _post(http, "/log", key, {
                        "operation": text, "approach": text, "result": result, "task_class": "staff_job",
                        "endpoint": "/match",
                    })  # fmt: skip
                _post(http, "/log", key, {
                    "operation": f"staff job: fence case {i}", "approach": text, "result": "success",
                    "task_class": "staff_job", "endpoint": "/match",
                })  # fmt: skip
            _post(http, "/log", key, {
                "operation": BENIGN_OPERATION, "approach": BENIGN_APPROACH, "result": "success",
                "task_class": "staff_job", "endpoint": "/match",
            })  # fmt: skip
    assert drainer.drain().failed == 0
    # a backfill of the last hour: a scheduled run would wait for the ops to settle
    now = datetime.now(UTC)
    window = {
        "since": (now - timedelta(hours=1)).isoformat(),
        "until": (now + timedelta(minutes=1)).isoformat(),
    }
    drainer.invoker.invoke(ANALYZER, window)
    report = drainer.invoker.invoke(CONSOLIDATOR, window)
    assert report["status"] == "ok" and report["candidates"] > 0, report

    answer = http.get("/playbooks", params={"limit": 50}, headers={"x-api-key": keys[0]})
    assert answer.status_code == 200, answer.text
    # what is offered for service: the entries served to fence-key-0 plus those its holdout arms
    # withhold (issue 16), i.e. the snapshot's selection, of which the key gets its treatment part
    settings = load_settings()
    snapshot = stack.client("s3").get_object(Bucket=settings.lake_bucket, Key=settings.playbooks_key)
    offered = PlaybookSnapshot.model_validate_json(snapshot["Body"].read()).select(limit=50)
    salt = settings.playbook_holdout_salt
    treatment = [e.entry_id for e in offered if arm_of("fence-key-0", e, salt) == "treatment"]
    assert [e["entry_id"] for e in answer.json()["entries"]] == treatment
    entries = [e.served() for e in offered]
    assert len(entries) < 50  # all of them on one page
    served = [
        f"{e['trigger']} {e['action']} {e.get('domain')} {e.get('task_class')}".casefold() for e in entries
    ]
    # the control: a benign lesson posted the same way is served, so the thresholds were met
    assert any(BENIGN_APPROACH.casefold() in text for text in served), served
    poisoned_served = [t for t in [*MEASURED, *SECOND_REVIEW] if any(_shows(s, t) for s in served)]
    assert poisoned_served == []
    for text in served:  # nothing of any shape the fence refuses
        assert "http" not in text and "hxxp" not in text and "10.0.0.5" not in text and "api-key" not in text
