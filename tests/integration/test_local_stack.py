"""The Docker-free local stack end to end: HTTP (API keys as API Gateway enforces them) → queue
→ writer → Parquet in the lake + Glue partitions, all provisioned from template.yaml."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from opslake_local.drain import Drainer
from opslake_local.http import LocalApi
from opslake_local.stack import QUIET_ENV, LocalStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@dataclass
class Local:
    stack: LocalStack
    drainer: Drainer
    http: httpx.Client

    @property
    def key(self) -> str:
        assert self.stack.api_key is not None
        return self.stack.api_key.value

    @property
    def queue_url(self) -> str:
        return self.stack.environment["OPSLAKE_OPS_QUEUE_URL"]

    def queue_depth(self) -> int:
        attributes = self.stack.client("sqs").get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return sum(int(v) for v in attributes.values())

    def objects(self, prefix: str) -> dict[str, bytes]:
        s3 = self.stack.client("s3")
        listed = s3.list_objects_v2(Bucket=self.stack.bucket, Prefix=prefix).get("Contents", [])
        return {
            o["Key"]: s3.get_object(Bucket=self.stack.bucket, Key=o["Key"])["Body"].read() for o in listed
        }


@pytest.fixture(scope="module")
def local() -> Iterator[Local]:
    with LocalStack(env_overrides=QUIET_ENV) as stack:
        invoker = stack.invoker()
        api = LocalApi(stack, invoker)
        base_url = api.start()
        try:
            with httpx.Client(base_url=base_url, timeout=30) as client:
                yield Local(stack, Drainer(stack, invoker), client)
        finally:
            api.stop()


def _op(**extra: Any) -> dict[str, Any]:
    return {"endpoint": "tool:query_db", "success": False, "duration_ms": 41.5,
            "error": 'column "wrokers" does not exist', **extra}  # fmt: skip


def test_health_needs_no_key(local: Local) -> None:
    answer = local.http.get("/health")
    assert answer.status_code == 200
    assert answer.json()["status"] == "ok"


@pytest.mark.parametrize("headers", [{}, {"x-api-key": "wrong-key-" + "0" * 30}], ids=["no key", "wrong key"])
def test_events_without_a_valid_key_is_forbidden_and_enqueues_nothing(
    local: Local, headers: dict[str, str]
) -> None:
    before = local.queue_depth()
    answer = local.http.post("/events", json=_op(), headers=headers)
    assert answer.status_code == 403
    assert answer.json() == {"message": "Forbidden"}
    assert local.queue_depth() == before


def test_unknown_route_answers_missing_authentication_token(local: Local) -> None:
    answer = local.http.get("/no/such/route", headers={"x-api-key": local.key})
    assert answer.status_code == 403
    assert answer.json() == {"message": "Missing Authentication Token"}


def test_accepted_op_lands_in_a_partition_with_the_key_name_as_reporter(local: Local) -> None:
    answer = local.http.post("/events", json=_op(session_id="s-test-1"), headers={"x-api-key": local.key})
    assert answer.status_code == 202
    (op_id,) = answer.json()["accepted"]

    result = local.drainer.drain()
    assert result.failed == 0
    assert result.written >= 1

    rows = []
    for key, data in local.objects("ops/").items():
        table = pq.read_table(io.BytesIO(data))
        rows += [(key, row) for row in table.to_pylist() if row["op_id"] == op_id]
    assert len(rows) == 1
    key, row = rows[0]
    dt, hour = (
        row["ingested_at"].astimezone(UTC).strftime("%Y-%m-%d"),
        row["ingested_at"].astimezone(UTC).strftime("%H"),
    )
    assert key.startswith(f"ops/dt={dt}/hour={hour}/") and key.endswith(".parquet")
    assert row["reporter_id"] == local.stack.key_name  # the key's NAME, not its id
    assert row["agent_id"] == local.stack.key_name
    assert row["ingested_at"] <= datetime.now(UTC)

    glue = local.stack.client("glue")
    partition = glue.get_partition(
        DatabaseName=local.stack.environment["OPSLAKE_GLUE_DATABASE"],
        TableName=local.stack.environment["OPSLAKE_OPS_TABLE"],
        PartitionValues=[dt, hour],
    )["Partition"]
    assert partition["StorageDescriptor"]["Location"].endswith(f"/ops/dt={dt}/hour={hour}/")
    assert local.queue_depth() == 0


def test_poison_message_goes_to_rejects_and_is_not_retried(local: Local) -> None:
    sqs = local.stack.client("sqs")
    sqs.send_message(QueueUrl=local.queue_url, MessageBody='{"endpoint": "tool:search", "success": tru')
    before = set(local.objects("rejects/"))

    result = local.drainer.drain()
    assert (result.received, result.failed) == (1, 0)

    new = {k: v for k, v in local.objects("rejects/").items() if k not in before}
    assert len(new) == 1
    (line,) = next(iter(new.values())).decode().splitlines()
    assert "not valid JSON" in json.loads(line)["reason"]
    assert local.queue_depth() == 0
    dlq = next(q.dead_letter_queue for q in local.stack.template.queues() if q.dead_letter_queue)
    dlq_url = local.stack.queue_url(dlq)
    assert sqs.receive_message(QueueUrl=dlq_url).get("Messages") is None


def test_concurrent_calls_to_different_functions_keep_their_own_routes(local: Local) -> None:
    """The local stack serves each API call on a thread of one process, while Powertools keeps the
    event being resolved on a class shared by every function's resolver (``BaseRouter.current_event``).
    Calls to different functions at once must still be recorded each under its own route (in Lambda
    each function has its own process; a mixed-up route here would make every local measurement lie)."""
    from concurrent.futures import ThreadPoolExecutor

    calls = [("/tables", f"race-tables-{i}") if i % 2 else ("/model", f"race-model-{i}") for i in range(60)]

    def call(path_and_session: tuple[str, str]) -> int:
        path, session = path_and_session
        headers = {"x-api-key": local.key, "x-opslake-session-id": session}
        return local.http.get(path, headers=headers).status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert set(pool.map(call, calls)) == {200}
    assert local.drainer.drain().failed == 0
    recorded = {
        row["session_id"]: row["endpoint"]
        for data in local.objects("ops/").values()
        for row in pq.read_table(io.BytesIO(data)).to_pylist()
        if (row["session_id"] or "").startswith("race-")
    }
    assert recorded == {session: path for path, session in calls}
