"""issue 12, "hijacked ids", on the local stack: another API key posts an op with bob's op_id
before bob does; after compaction ``/profile/bob`` must still show bob's real op (the writer and
compaction keep one row per (reporter_id, op_id), not per op_id)."""

from __future__ import annotations

import httpx
import pytest

from opslake_local.drain import Drainer
from opslake_local.stack import LocalStack
from tests.integration.jobs_support import compact_closed_hours

pytestmark = pytest.mark.integration

OP_ID = "bob-run-7:step-1"


def post(client: httpx.Client, key: str, **op: object) -> None:
    answer = client.post(
        "/events", json={"op_id": OP_ID, "agent_id": "bob", **op}, headers={"x-api-key": key}
    )
    assert answer.status_code == 202, answer.text
    assert answer.json()["accepted"] == [OP_ID]


def test_a_forged_op_with_bobs_op_id_never_replaces_bobs_op(
    local: tuple[LocalStack, httpx.Client, Drainer],
) -> None:
    stack, client, drainer = local
    bob, mallory = stack.create_api_key("bob-runtime"), stack.create_api_key("mallory-runtime")
    forged = {"endpoint": "tool:forged", "success": False, "duration_ms": 1, "error_type": "Forged"}
    real = {"endpoint": "tool:real", "success": True, "duration_ms": 42}

    post(client, mallory.value, **forged)  # first: "earliest ingested_at wins" used to favour it
    assert drainer.drain().failed == 0
    post(client, bob.value, **real)
    assert drainer.drain().failed == 0
    post(client, bob.value, **real)  # bob retries (same key, same op_id): still one op
    assert drainer.drain().failed == 0

    report = compact_closed_hours(stack)
    assert report.errors == {}
    assert report.compacted  # the hour now reads from its compacted files
    assert sum(p.duplicates_dropped for p in report.compacted) == 1  # only bob's own retry

    answer = client.get("/profile/bob", params={"hours": "3"}, headers={"x-api-key": bob.value})
    assert answer.status_code == 200, answer.text
    profile = answer.json()
    mine = [op for op in profile["recent_ops"] if op["op_id"] == OP_ID]
    assert sorted(op["endpoint"] for op in mine) == ["tool:forged", "tool:real"]
    assert profile["ops"] == 2  # bob's real op is counted once, next to the other key's claim
    # and the answer tells them apart: each op names the key that posted it, the profile its keys
    assert sorted((op["endpoint"], op["reporter_id"]) for op in mine) == [
        ("tool:forged", "mallory-runtime"),
        ("tool:real", "bob-runtime"),
    ]
    assert profile["reporter_count"] == 2
    assert sorted(r["reporter_id"] for r in profile["reporters"]) == ["bob-runtime", "mallory-runtime"]
