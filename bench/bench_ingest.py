"""POST /events on the local stack: SQS calls and wall time per 500-op request, then the drain.

Starts the local stack (moto server from template.yaml, the real handlers, the local HTTP API),
posts ``--requests`` requests of ``--ops`` realistic ops one after the other (the queue grows, as
it does under load: moto's send cost grows with queue depth), counts SendMessageBatch calls on
moto's side of the wire for each request, then drains the queue through the writer and checks that
every accepted op landed exactly once. ``--code DIR`` runs another checkout's code (for example a
worktree of the commit before issue 13) with this script, so old and new are measured alike.

Prints figures; asserts nothing.

    .venv/bin/python bench/bench_ingest.py [--requests 5] [--ops 500] [--code DIR]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--ops", type=int, default=500)
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    root = args.code.resolve()
    sys.path[:0] = [str(root / "layers" / "common"), str(root / "local")]

    import httpx
    import pyarrow.parquet as pq
    from moto.sqs.responses import SQSResponse

    import opslake
    from opslake_local.drain import Drainer
    from opslake_local.http import LocalApi
    from opslake_local.stack import QUIET_ENV, LocalStack

    calls = Counter[str]()
    original = SQSResponse.send_message_batch

    def counted(self: SQSResponse) -> Any:  # the moto server runs in this process: count every call
        calls["SendMessageBatch"] += 1
        return original(self)

    SQSResponse.send_message_batch = counted  # type: ignore[method-assign]
    print(f"code: {Path(opslake.__file__).parents[3]}")
    # that checkout's template, hence its functions' code too (not the working directory's)
    with LocalStack(root / "template.yaml", env_overrides=QUIET_ENV) as stack:
        invoker = stack.invoker()
        api = LocalApi(stack, invoker)
        base_url = api.start()
        try:
            assert stack.api_key is not None
            key = {"x-api-key": stack.api_key.value}
            accepted: list[str] = []
            walls: list[float] = []
            with httpx.Client(base_url=base_url, timeout=600) as client:
                client.post(
                    "/events", json={"endpoint": "warm", "success": True, "duration_ms": 1}, headers=key
                )
                for request in range(args.requests):
                    ops = [
                        {"op_id": f"b-{request}-{i}", "endpoint": f"tool:search_{i % 7}", "success": i % 5 > 0,
                         "duration_ms": 12.5 + i, "agent_id": f"agent-{i % 11}", "session_id": f"s-{request}",
                         "input_summary": f"query rows where city = 'Austin' and shift = {i}",
                         "error": None if i % 5 else "timeout after 30 s", "attributes": {"attempt": str(i % 3)}}
                        for i in range(args.ops)
                    ]  # fmt: skip
                    before = calls["SendMessageBatch"]
                    start = time.perf_counter()
                    answer = client.post("/events", json={"ops": ops}, headers=key)
                    walls.append(time.perf_counter() - start)
                    assert answer.status_code == 202, answer.text
                    accepted += answer.json()["accepted"]
                    print(f"  request {request + 1}: {args.ops} ops, {calls['SendMessageBatch'] - before} "
                          f"SendMessageBatch calls, {walls[-1] * 1000:.0f} ms")  # fmt: skip
            depth = stack.client("sqs").get_queue_attributes(
                QueueUrl=stack.queue_url("OpsQueue"), AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]["ApproximateNumberOfMessages"]
            print(f"  median {statistics.median(walls) * 1000:.0f} ms, max {max(walls) * 1000:.0f} ms; "
                  f"{len(accepted)} ops accepted in {depth} queued messages (+1 warm-up op)")  # fmt: skip
            start = time.perf_counter()
            drained = Drainer(stack, invoker).drain()
            drain_s = time.perf_counter() - start
            s3 = stack.client("s3")
            stored = Counter[str]()
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=stack.bucket, Prefix="ops/"):
                for item in page.get("Contents", []):
                    body = s3.get_object(Bucket=stack.bucket, Key=item["Key"])["Body"].read()
                    stored.update(
                        pq.read_table(io.BytesIO(body), columns=["op_id"]).column("op_id").to_pylist()
                    )
            lost = sum(1 for op_id in accepted if stored[op_id] == 0)
            twice = sum(1 for op_id in accepted if stored[op_id] > 1)
            print(f"  drain: {drain_s:.1f} s ({drained.failed} failed); lost {lost}, duplicated {twice}")
        finally:
            api.stop()


if __name__ == "__main__":
    main()
