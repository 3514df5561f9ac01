"""``opslake demo``: the whole ingest path, locally, in well under a minute.

Starts the local stack and API in-process, lets three agent runtimes report a few hundred ops
over HTTP (some invalid, some carrying secrets), pushes two poison messages straight onto the
queue, drains the queue through the writer and prints what landed in the lake: Parquet objects,
rows per partition, Glue partitions, rejects, and proof that secrets were redacted. A copy of
the lake is left under ``out/demo/lake/``. Last, three analyst queries from ``queries/`` run on
the embedded engine (Athena SQL on DuckDB over the moto lake). Nothing keeps running.
"""

from __future__ import annotations

import io
import json
import random
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq

from opslake.config import load_settings
from opslake.query.factory import create_engine
from opslake_local.drain import Drainer
from opslake_local.http import LocalApi
from opslake_local.queries import load_queries, queries_dir, render
from opslake_local.stack import QUIET_ENV, ApiKey, LocalStack

ANALYST_QUERIES = ("failure_rate_by_endpoint_hour", "latency_p50_p95_by_endpoint", "top_error_types")
RUNTIMES = ("runtime-staffing", "runtime-analyst", "runtime-support")
OPS_PER_RUNTIME = 100
SECRET_MARKER = "Bearer abc123"
_SUCCESSES = {
    "tool:query_db": "SELECT name FROM workers WHERE city = 'Austin' -> 12 rows",
    "/sql": "SELECT count(*) FROM shifts -> 1 row",
    "tool:search": "search 'forklift certified' -> 8 hits",
    "scenario:fill": "filled 3/3 shifts",
}
_FAILURES = (
    ("tool:query_db", "UndefinedColumn", 'column "wrokers" does not exist'),
    ("/sql", "Timeout", "query timed out after 30000 ms"),
    ("tool:search", "NotFound", "404 worker not found: w-4471"),
    ("scenario:fill", "Timeout", "upstream scheduler timed out after 10 s"),
    ("tool:query_db", "AuthError", f"401 from db proxy, header Authorization: {SECRET_MARKER}def456ghi789"),
)


def _print(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 70 - len(title)))


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    """A plain-text table: left-aligned text, right-aligned numbers."""
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    numeric = [all(isinstance(row[i], int | float) for row in rows) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if n else c.ljust(w) for c, w, n in zip(row, widths, numeric, strict=True)
        ).rstrip()

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths), *(line(r) for r in cells[1:])])


# ---- sample traffic -----------------------------------------------------------------------------
def sample_op(rng: random.Random, runtime: str, now: datetime) -> dict[str, Any]:
    """One realistic op: ~20% failures, ts spread over the last two hours."""
    ts = now - timedelta(seconds=rng.uniform(0, 7200))
    agent = f"{runtime.split('-')[1]}-agent-{rng.randint(1, 3)}"
    base: dict[str, Any] = {
        "ts": ts.isoformat(timespec="milliseconds"),
        "agent_id": agent,
        "session_id": f"s-{rng.randint(1000, 9999)}",
        "source": "runtime",
        "duration_ms": round(rng.lognormvariate(5, 0.8), 1),
    }
    if rng.random() < 0.2:
        endpoint, error_type, error = rng.choice(_FAILURES)
        return {**base, "endpoint": endpoint, "success": False, "error": error, "error_type": error_type}
    endpoint = rng.choice(list(_SUCCESSES))
    op = {**base, "endpoint": endpoint, "success": True, "output_summary": _SUCCESSES[endpoint]}
    if endpoint == "scenario:fill":
        op["attributes"] = {"role": "picker", "city": "Austin", "state": "TX", "count": 3}
    return op


def invalid_ops(now: datetime) -> list[dict[str, Any]]:
    """Ops a buggy runtime might send; the API must refuse each with a reason."""
    return [
        {"endpoint": "tool:search", "duration_ms": 12.0},  # no success
        {"endpoint": "tool:search", "success": True, "duration_ms": "fast"},
        {"endpoint": "/sql", "success": True, "duration_ms": 3.0, "reporter_id": "someone-else"},
        {
            "endpoint": "/sql",
            "success": True,
            "duration_ms": 3.0,
            "ts": (now + timedelta(days=3)).isoformat(),
        },
    ]


def post_traffic(client: httpx.Client, keys: dict[str, ApiKey], rng: random.Random) -> Counter[str]:
    """Each runtime reports its ops: some one by one, the rest in {"ops": [...]} batches."""
    statuses: Counter[str] = Counter()
    now = datetime.now(UTC)
    for runtime, key in keys.items():
        ops = [sample_op(rng, runtime, now) for _ in range(OPS_PER_RUNTIME)]
        headers = {"x-api-key": key.value}
        singles, rest = ops[:10], ops[10:]
        for op in singles:
            statuses[str(client.post("/events", json=op, headers=headers).status_code)] += 1
        for start in range(0, len(rest), 45):
            answer = client.post("/events", json={"ops": rest[start : start + 45]}, headers=headers)
            statuses[str(answer.status_code)] += 1
    return statuses


def show_refusals(client: httpx.Client, key: ApiKey) -> None:
    """Invalid ops (a partial 202 and a 400), and a request without an API key (403)."""
    headers = {"x-api-key": key.value}
    now = datetime.now(UTC)
    bad = invalid_ops(now)
    good = sample_op(random.Random(1), key.name, now)
    answer = client.post("/events", json={"ops": [good, *bad]}, headers=headers)
    body = answer.json()
    print(f'POST /events {{"ops": [1 valid + {len(bad)} invalid]}} -> {answer.status_code}, '
          f"accepted {len(body.get('accepted', []))}, rejected:")  # fmt: skip
    for rejected in body.get("rejected", []):
        print(f"   [{rejected['index']}] {rejected['message'][:110]}")
    answer = client.post("/events", json=bad[1], headers=headers)
    print(f"POST /events (one op, duration_ms 'fast') -> {answer.status_code} {answer.text[:140]}")
    answer = client.post("/events", json=good)
    print(f"POST /events without x-api-key -> {answer.status_code} {answer.text}")
    answer = client.post("/events", json=good, headers={"x-api-key": "not-a-key-" + "x" * 30})
    print(f"POST /events with an unknown key -> {answer.status_code} {answer.text}")
    answer = client.get("/health")
    print(f"GET /health (no key needed) -> {answer.status_code} {answer.text}")


def send_poison(stack: LocalStack) -> None:
    """Two messages a buggy producer could put straight on the queue, bypassing the API."""
    sqs = stack.client("sqs")
    url = stack.environment["OPSLAKE_OPS_QUEUE_URL"]
    sqs.send_message(QueueUrl=url, MessageBody='{"endpoint": "tool:search", "success": tru')
    sqs.send_message(
        QueueUrl=url,
        MessageBody=json.dumps({"op_id": "poison-1", "endpoint": "tool:search", "success": "maybe"}),
    )
    print("sent 2 raw messages to the ops queue: truncated JSON, and an op violating the schema")


# ---- what landed --------------------------------------------------------------------------------
def lake_objects(stack: LocalStack) -> dict[str, bytes]:
    """Every object under the lake bucket's ops/ and rejects/ prefixes."""
    s3 = stack.client("s3")
    objects: dict[str, bytes] = {}
    for prefix in ("ops/", "rejects/"):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=stack.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                objects[item["Key"]] = s3.get_object(Bucket=stack.bucket, Key=item["Key"])["Body"].read()
    return objects


def report_lake(stack: LocalStack, objects: dict[str, bytes]) -> None:
    """Parquet objects, rows per partition, Glue partitions, rejects and the redaction check."""
    parquet = {k: pq.read_table(io.BytesIO(v)) for k, v in objects.items() if k.endswith(".parquet")}
    _print(f"Parquet objects in s3://{stack.bucket}/")
    print(
        table(
            [(k, len(objects[k]), t.num_rows) for k, t in sorted(parquet.items())], ["key", "bytes", "rows"]
        )
    )

    per_partition: Counter[str] = Counter()
    outcome: Counter[tuple[str, str]] = Counter()
    for key, data in parquet.items():
        per_partition[key.rsplit("/", 1)[0]] += data.num_rows
        for endpoint, success in zip(data["endpoint"].to_pylist(), data["success"].to_pylist(), strict=True):
            outcome[(endpoint, "ok" if success else "failed")] += 1
    _print("rows per partition")
    print(table(sorted(per_partition.items()), ["partition", "rows"]))
    _print("rows per endpoint")
    endpoints = sorted({e for e, _ in outcome})
    print(
        table(
            [(e, outcome[(e, "ok")], outcome[(e, "failed")]) for e in endpoints], ["endpoint", "ok", "failed"]
        )
    )

    reporters = Counter(r for t in parquet.values() for r in t["reporter_id"].to_pylist())
    print(
        "rows per reporter_id (the API key's name): "
        + ", ".join(f"{k} {v}" for k, v in sorted(reporters.items()))
    )

    glue = stack.client("glue")
    database, ops_table = stack.environment["OPSLAKE_GLUE_DATABASE"], stack.environment["OPSLAKE_OPS_TABLE"]
    partitions = glue.get_partitions(DatabaseName=database, TableName=ops_table)["Partitions"]
    _print(f"Glue partitions of {database}.{ops_table}")
    print(table([("/".join(p["Values"]), p["StorageDescriptor"]["Location"]) for p in partitions],
                ["values", "location"]))  # fmt: skip

    _print("rejects (never retried)")
    for key, data in sorted(objects.items()):
        if key.startswith("rejects/"):
            print(key)
            for line in data.decode().splitlines():
                print(f"   {json.loads(line).get('reason', line)[:120]}")

    _print("redaction")
    leaked = [k for k, v in objects.items() if SECRET_MARKER.encode() in v]
    errors = [e for t in parquet.values() for e in t["error"].to_pylist() if e and "REDACTED" in e]
    print(f'"{SECRET_MARKER}" found in {len(leaked)} of {len(objects)} lake objects; '
          f"{len(errors)} error texts carry [REDACTED], e.g.:")  # fmt: skip
    if errors:
        print(f"   {errors[0]}")


def export_lake(objects: dict[str, bytes], out_dir: Path) -> None:
    """Copy ops/ and rejects/ to ``out_dir`` with the bucket's layout (readable offline)."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    for key, data in objects.items():
        path = out_dir / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    sql = (
        "SELECT endpoint, count(*) n, avg(duration_ms) ms "
        f"FROM read_parquet('{out_dir}/ops/*/*/*.parquet', hive_partitioning=true) GROUP BY 1 ORDER BY n DESC"
    )
    print(f"\nlake copied to {out_dir}/  open it with:")
    print(f"""  python -c "import duckdb; print(duckdb.sql(\\"{sql}\\"))\"""")
    print(f"""  python -c "import pyarrow.parquet as pq; print(pq.read_table('{out_dir}/ops').num_rows)\"""")


def show_analyst_queries(stack: LocalStack, names: Sequence[str] = ANALYST_QUERIES) -> None:
    """Run analyst queries from queries/ on the embedded engine, as ``opslake queries run`` does."""
    engine = create_engine(load_settings(stack.environment), glue_client=stack.client("glue"))
    queries = load_queries(queries_dir(stack.template.path))
    for name in names:
        query = queries[name]
        _print(f"analyst query: {name}")
        print(f"-- {query.description}")
        started = time.perf_counter()
        result = engine.run(query.sql)
        print(render(result, "table").replace(f", {result.engine})", f", {result.engine} engine, "
              f"{(time.perf_counter() - started) * 1000:.0f} ms)"))  # fmt: skip


# ---- main ---------------------------------------------------------------------------------------
def run(out_dir: Path = Path("out/demo/lake"), seed: int = 7) -> None:
    """The demo: stack up, traffic, poison, drain, report, export, stack down."""
    started = time.perf_counter()
    with LocalStack(env_overrides=QUIET_ENV) as stack:
        invoker = stack.invoker()
        api = LocalApi(stack, invoker)
        base_url = api.start()
        try:
            keys = {name: stack.create_api_key(name) for name in RUNTIMES}
            _print("local stack")
            print(f"moto {stack.endpoint}   API {base_url}   bucket {stack.bucket}")
            print("API keys (reporter identities): " + ", ".join(keys))
            with httpx.Client(base_url=base_url, timeout=30) as client:
                _print(f"{len(RUNTIMES)} runtimes report {len(RUNTIMES) * OPS_PER_RUNTIME} ops over HTTP")
                statuses = post_traffic(client, keys, random.Random(seed))
                print("answers: " + ", ".join(f"{n} x {s}" for s, n in sorted(statuses.items())))
                _print("what the API refuses")
                show_refusals(client, keys[RUNTIMES[0]])
            _print("poison on the queue")
            send_poison(stack)
            _print("drain the queue through WriterFunction")
            result = Drainer(stack, invoker).drain()
            print(f"received {result.received}, done {result.written}, left for retry {result.failed}")
            objects = lake_objects(stack)
            report_lake(stack, objects)
            export_lake(objects, out_dir)
            show_analyst_queries(stack)
        finally:
            api.stop()
    print(f"\ndemo finished in {time.perf_counter() - started:.1f} s; nothing left running.")


def main() -> None:
    run()


if __name__ == "__main__":
    main()
