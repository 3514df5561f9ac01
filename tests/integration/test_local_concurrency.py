"""The local stack under concurrent requests behaves as Lambda does: each function container
serves one request at a time, so concurrent ``POST /events`` never mix their answers or their
reporters, and no op is lost (issue 12)."""

from __future__ import annotations

import io
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pyarrow.parquet as pq
import pytest

from opslake_local.drain import Drainer
from opslake_local.http import LocalApi
from opslake_local.stack import QUIET_ENV, LocalStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REQUESTS = 60
OPS_PER_REQUEST = 3


@dataclass(frozen=True)
class Sent:
    """One request: which key sent it and the op ids it carried."""

    key_name: str
    op_ids: tuple[str, ...]


@pytest.fixture()
def fresh() -> Iterator[tuple[LocalStack, LocalApi, Drainer]]:
    """A stack just started (no handler loaded yet: the first requests are cold starts)."""
    with LocalStack(env_overrides=QUIET_ENV) as stack:
        invoker = stack.invoker()
        api = LocalApi(stack, invoker)
        api.start()
        try:
            yield stack, api, Drainer(stack, invoker)
        finally:
            api.stop()


def _ops(request: int, key_name: str) -> list[dict[str, object]]:
    return [
        {"op_id": f"conc-{request:02d}-{n}", "agent_id": f"claimed-{request:02d}", "endpoint": "tool:search",
         "success": True, "duration_ms": 5.0, "session_id": f"s-{key_name}"}
        for n in range(OPS_PER_REQUEST)
    ]  # fmt: skip


def test_concurrent_events_keep_their_own_answers_and_reporters(
    fresh: tuple[LocalStack, LocalApi, Drainer],
) -> None:
    stack, api, drainer = fresh
    keys = [stack.create_api_key("conc-alice"), stack.create_api_key("conc-bob")]
    start = threading.Barrier(REQUESTS)

    def post(request: int) -> tuple[Sent, int, list[str]]:
        key = keys[request % 2]
        ops = _ops(request, key.name)
        with httpx.Client(base_url=api.base_url, timeout=60) as client:
            start.wait(timeout=30)  # all requests leave together, right after start
            answer = client.post("/events", json={"ops": ops}, headers={"x-api-key": key.value})
        accepted = answer.json().get("accepted", []) if answer.status_code == 202 else []
        return Sent(key.name, tuple(op["op_id"] for op in ops)), answer.status_code, accepted

    with ThreadPoolExecutor(max_workers=REQUESTS) as pool:
        results = list(pool.map(post, range(REQUESTS)))

    statuses = Counter(status for _, status, _ in results)
    foreign = [sent for sent, _, accepted in results if sorted(accepted) != sorted(sent.op_ids)]

    assert drainer.drain().failed == 0
    s3 = stack.client("s3")
    stored: Counter[str] = Counter()
    reporters: dict[str, set[str]] = {}
    for listed in s3.list_objects_v2(Bucket=stack.bucket, Prefix="ops/").get("Contents", []):
        body = s3.get_object(Bucket=stack.bucket, Key=listed["Key"])["Body"].read()
        for row in pq.read_table(io.BytesIO(body)).to_pylist():
            if row["op_id"].startswith("conc-"):
                stored[row["op_id"]] += 1
                reporters.setdefault(row["op_id"], set()).add(row["reporter_id"])
    expected = {op_id: sent.key_name for sent, _, _ in results for op_id in sent.op_ids}
    lost = [op_id for op_id in expected if stored[op_id] == 0]
    duplicated = [op_id for op_id, count in stored.items() if count > 1]
    misattributed = [op_id for op_id, key in expected.items() if reporters.get(op_id, {key}) != {key}]
    print(f"answers with foreign op_ids: {len(foreign)}, lost: {len(lost)}, "
          f"duplicated: {len(duplicated)}, misattributed: {len(misattributed)}")  # fmt: skip

    assert statuses == {202: REQUESTS}
    assert foreign == []
    assert lost == []
    assert duplicated == []
    assert misattributed == []
