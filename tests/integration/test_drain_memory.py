"""The local stack's memory does not grow with every queue message ever sent: moto tracks each SQS
message it makes (and each copy a receive returns) in a class list, which kept a long `opslake local
up` session or a load bench growing by ~7.7 KB per op after the messages were deleted."""

from __future__ import annotations

import httpx
import pytest
from moto.sqs.models import Message

from opslake_local.drain import Drainer
from opslake_local.stack import LocalStack

pytestmark = pytest.mark.integration


def test_drained_messages_are_not_kept_alive_by_moto(local: tuple[LocalStack, httpx.Client, Drainer]) -> None:
    stack, client, drainer = local
    key = stack.create_api_key("mem-runtime")
    accepted = 0
    for request in range(30):
        ops = [
            {"op_id": f"mem-{request}-{i}", "endpoint": "tool:x", "success": True, "duration_ms": 1}
            for i in range(20)
        ]
        answer = client.post("/events", json={"ops": ops}, headers={"x-api-key": key.value})
        assert answer.status_code == 202, answer.text
        accepted += len(answer.json()["accepted"])
        if request % 10 == 9:
            result = drainer.drain()
            assert result.failed == 0 and result.written >= 10
    assert accepted == 600
    # 30 messages sent and 30 received copies were tracked before the drainer let moto forget them
    assert len(Message.instances_tracked) == 0  # type: ignore[attr-defined]
