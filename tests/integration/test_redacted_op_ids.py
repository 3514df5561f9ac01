"""issue 13, on the local stack: ops of one key whose op ids are redacted must all land. Op ids
were replaced by "[REDACTED]" when they held something secret-looking (and "c1-<32 hex>" ids about
once in 2,700), so several ops shared one (reporter_id, op_id) and the writer and compaction kept
one of them; a retry of such an op must still dedupe to one."""

from __future__ import annotations

import httpx
import pytest

from opslake_local.drain import Drainer
from opslake_local.stack import LocalStack
from tests.integration.jobs_support import compact_closed_hours

pytestmark = pytest.mark.integration

SECRET = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
OP_IDS = {
    "tool:a": "c1-92c54f3af1c4c6832bf0a75891de6ed7",  # an id, once taken for a secret by the entropy rule
    "tool:b": "c1-5b71f8c393092abe7d5fb4e2afc66d82",
    "tool:c": f"run-{SECRET}",  # a real secret inside an id: redacted, to a digest of its own
    "tool:d": "V1StGXR8_Z5jdHi6B-myTq9k",  # a random-looking (nanoid) id: redacted the same way
}


def post(client: httpx.Client, key: str, endpoints: list[str]) -> list[str]:
    ops = [
        {"op_id": OP_IDS[e], "agent_id": "g-bot", "endpoint": e, "success": True, "duration_ms": 3}
        for e in endpoints
    ]
    answer = client.post("/events", json={"ops": ops}, headers={"x-api-key": key})
    assert answer.status_code == 202, answer.text
    return list(answer.json()["accepted"])


def test_ops_with_redacted_op_ids_all_land_and_retries_dedupe(
    local: tuple[LocalStack, httpx.Client, Drainer],
) -> None:
    stack, client, drainer = local
    key = stack.create_api_key("g-runtime")
    accepted = post(client, key.value, sorted(OP_IDS))
    assert len(set(accepted)) == 4 and not any(SECRET in op_id for op_id in accepted)
    assert drainer.drain().failed == 0
    retried = post(client, key.value, ["tool:c", "tool:d"])  # the client retries: same ids again
    assert retried == accepted[2:]
    assert drainer.drain().failed == 0

    report = compact_closed_hours(stack)
    assert report.errors == {}
    assert sum(p.duplicates_dropped for p in report.compacted) == 2  # the two retries, nothing else

    answer = client.get("/profile/g-bot", params={"hours": "3"}, headers={"x-api-key": key.value})
    assert answer.status_code == 200, answer.text
    profile = answer.json()
    assert SECRET not in answer.text
    assert profile["ops"] == 4
    assert sorted(op["endpoint"] for op in profile["recent_ops"]) == sorted(OP_IDS)
    assert sorted(op["op_id"] for op in profile["recent_ops"]) == sorted(accepted)
