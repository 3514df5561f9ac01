"""A fleet on the local stack (issue 13): the API's functions run in several processes
(:class:`~opslake_local.containers.ContainerPool`, Lambda's scale-out), concurrent clients post
hundreds of ops per request while the background drainer writes, and every accepted op lands in
the lake exactly once, under the key that sent it."""

from __future__ import annotations

import io
import os
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pyarrow.parquet as pq
import pytest

from opslake_local.containers import ContainerPool
from opslake_local.drain import BackgroundDrainer, Drainer
from opslake_local.http import LocalApi
from opslake_local.invoke import FunctionError
from opslake_local.stack import QUIET_ENV, LocalStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLIENTS = 4
REQUESTS_PER_CLIENT = 2
OPS_PER_REQUEST = 200


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[LocalStack, LocalApi, ContainerPool, Drainer]]:
    with LocalStack(env_overrides=QUIET_ENV) as stack:
        pool = ContainerPool(stack, containers=2)
        api = LocalApi(stack, pool)
        api.start()
        drainer = Drainer(stack, stack.invoker())
        try:
            yield stack, api, pool, drainer
        finally:
            api.stop()
            pool.close()


def _ops(client: int, request: int) -> list[dict[str, object]]:
    return [
        {"op_id": str(uuid.uuid4()), "endpoint": f"tool:t{n % 5}", "success": n % 4 > 0, "duration_ms": 3.0,
         "agent_id": f"fleet-{client}", "input_summary": f"SELECT * FROM t WHERE id = {request * 1000 + n}",
         "error": None if n % 4 else "ThrottlingException: Rate exceeded"}
        for n in range(OPS_PER_REQUEST)
    ]  # fmt: skip


def _lake_rows(stack: LocalStack) -> Counter[tuple[str, str]]:
    """(reporter_id, op_id) → copies in the raw Parquet objects (before any dedupe)."""
    s3 = stack.client("s3")
    rows: Counter[tuple[str, str]] = Counter()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=stack.bucket, Prefix="ops/"):
        for item in page.get("Contents", []):
            table = pq.read_table(
                io.BytesIO(s3.get_object(Bucket=stack.bucket, Key=item["Key"])["Body"].read()),
                columns=["reporter_id", "op_id"],
            )
            rows.update(
                zip(table.column("reporter_id").to_pylist(), table.column("op_id").to_pylist(), strict=True)
            )
    return rows


def test_concurrent_clients_land_every_accepted_op_exactly_once(
    fleet: tuple[LocalStack, LocalApi, ContainerPool, Drainer],
) -> None:
    stack, api, _, drainer = fleet
    keys = [stack.create_api_key(f"fleet-key-{i}") for i in range(2)]
    start = threading.Barrier(CLIENTS)

    def client(index: int) -> list[tuple[str, int, list[str], list[str]]]:
        key = keys[index % 2]
        answers = []
        with httpx.Client(base_url=api.base_url, timeout=120, headers={"x-api-key": key.value}) as http:
            start.wait(timeout=60)
            for request in range(REQUESTS_PER_CLIENT):
                ops = _ops(index, request)
                answer = http.post("/events", json={"ops": ops})
                accepted = answer.json().get("accepted", []) if answer.status_code == 202 else []
                answers.append((key.name, answer.status_code, [str(op["op_id"]) for op in ops], accepted))
        return answers

    background = BackgroundDrainer(drainer, interval_s=0.1).start()  # writes while clients post
    try:
        with ThreadPoolExecutor(max_workers=CLIENTS) as executor:
            answers = [a for batch in executor.map(client, range(CLIENTS)) for a in batch]
    finally:
        background.stop()
    assert drainer.drain().failed == 0

    assert Counter(status for _, status, _, _ in answers) == {202: CLIENTS * REQUESTS_PER_CLIENT}
    assert all(sorted(accepted) == sorted(sent) for _, _, sent, accepted in answers)
    expected = Counter((key, op_id) for key, _, sent, _ in answers for op_id in sent)
    assert len(expected) == CLIENTS * REQUESTS_PER_CLIENT * OPS_PER_REQUEST
    assert _lake_rows(stack) == expected  # none lost, none twice, each under its sender's key


def test_invocations_run_in_every_container_and_not_in_this_process(
    fleet: tuple[LocalStack, LocalApi, ContainerPool, Drainer],
) -> None:
    _, api, pool, _ = fleet
    pids = {container.process.pid for container in pool._all}
    assert len(pids) == 2 and os.getpid() not in pids
    with httpx.Client(base_url=api.base_url, timeout=60) as http:
        for _ in range(4):
            assert http.get("/health").status_code == 200
    assert all(container.invocations >= 2 for container in pool._all)  # idle containers queue FIFO


def test_a_handler_error_is_a_function_error_and_the_container_keeps_serving(
    fleet: tuple[LocalStack, LocalApi, ContainerPool, Drainer],
) -> None:
    stack, api, pool, _ = fleet
    with pytest.raises(KeyError, match="no function"):
        pool.invoke("NoSuchFunction", {})
    writer = next(s.function for s in stack.template.sqs_sources())
    # the writer's handler raises on an event with no Records
    with pytest.raises(FunctionError, match="failed"):
        pool.invoke(writer, {})
    assert stack.api_key is not None
    with httpx.Client(base_url=api.base_url, timeout=60) as http:
        answer = http.post(
            "/events",
            json={"endpoint": "tool:x", "success": True, "duration_ms": 1},
            headers={"x-api-key": stack.api_key.value},
        )
    assert answer.status_code == 202


def test_the_drainer_asks_a_queue_its_message_size_once_not_on_every_poll(
    fleet: tuple[LocalStack, LocalApi, ContainerPool, Drainer],
) -> None:
    stack, _, _, _ = fleet
    drainer = Drainer(stack, stack.invoker())
    asked: list[str] = []

    def count(params: dict[str, object], **_: object) -> None:
        if "MaximumMessageSize" in str(params.get("AttributeNames")):
            asked.append(str(params["QueueUrl"]))

    drainer.sqs.meta.events.register("provide-client-params.sqs.GetQueueAttributes", count)
    for _ in range(5):
        drainer.drain_once()  # the queues are empty: each poll is a receive that finds nothing
    assert sorted(asked) == sorted({stack.queue_url(s.queue) for s in stack.template.sqs_sources()})
