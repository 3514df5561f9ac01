"""The cost per million ops, measured: the real handlers' durations and AWS calls -> dollars per day.

Three parts, each in its own process (their memory and their moto apart), then the arithmetic
(bench/cost_model.py) at 10, 100 and 1,000 ops/s:

- ``ingest``: the local stack (moto server from template.yaml, in this process) and the real
  ``POST /events`` handler invoked with REST API proxy events of as many ops as the SDK sends per
  request at that rate (``--clients`` runtimes, each flushing every second, at most 500 ops); its
  duration, its SQS calls and their payload (counted at botocore's ``_make_api_call``) and the
  bytes it prints (log lines and EMF). Then the real writer, invoked with one SQS event as the
  event source mapping would build it at that rate (``BatchSize``, ``MaximumBatchingWindow``,
  Lambda's 6 MB payload) from the messages the handler queued: its duration, S3 PUTs and bytes,
  Glue calls, log bytes.
- ``jobs``: the analyzer bench's day of 1,000,000 ops (bench_analyzer.lake_files, 1% failures in 40
  modes) on the local stack with the embedded engine and a fake model (tests/fake_llm.py): one
  catch-up run, then a steady run over the next 5 minutes (the schedule's period) is measured; the
  consolidator likewise over 30 minutes (no compaction). Bytes scanned and queries as the engine
  reports them, prompts' sizes as the fake model received them, S3/Glue calls.
- ``compaction``: one hour of writer files as the writer makes them at 1M ops/day, compacted
  (bench_compaction's lake, on moto's in-process mock): duration, S3 and Glue calls.

Durations are this 2-core VM's, used as they are for Lambda's (a 1,024 MB function has ~0.58 of a
vCPU, more than half of one of these cores under load: neither clearly faster nor slower; the jobs
ran DuckDB in-process, which in AWS is Athena's work while the function waits: an upper bound).
A job's time at a higher rate: its steady run's, plus the time per op read between its steady run
(one hour's partition) and its first run (the whole day) for the larger hour; bytes scanned grow
with the hour's ops (a run reads the current hour's partition); nothing shrinks below 1M ops/day.
No free tier. Prints a table (and ``--json FILE``); asserts nothing.

    .venv/bin/python bench/bench_cost.py [--clients 10] [--json /tmp/cost.json]
    .venv/bin/python bench/bench_cost.py --measured /tmp/cost.json   # re-price without measuring
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
for extra in (ROOT / "layers" / "common", ROOT / "local", HERE, ROOT):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import cost_model  # noqa: E402

RATES = (10, 100, 1000)
LAMBDA_PAYLOAD_MAX = 6 * 1024 * 1024
SQS_RECEIVE_MAX = 10
# Lambda's START/END/REPORT lines (with X-Ray's trace id on REPORT): ~330 bytes an invocation.
PLATFORM_LOG_BYTES = 330
# What we assume where nothing here can measure it (stated in the output):
ASSUMED = {
    "sqs_idle_polls_per_day": 5 * 3 * 1440,  # 5 pollers, 20 s long polls, all day (an upper bound)
    "athena_gets_per_query_per_file": 3,  # Athena's GETs of a Parquet file: footer + column ranges
    "glue_calls_per_athena_query": 3,  # GetDatabase/GetTable/GetPartitions on the query's behalf
    "llm_output_tokens_per_call": 600,  # the answer's max_tokens (llm_max_output_tokens): a bound
    "chars_per_token": 4,
    "lake_days": 30,  # storage priced for a lake holding 30 days of ops
    "noncurrent_days": 7,  # writer files stay 7 days as noncurrent versions once compacted
}


# ---- counting what the handlers ask AWS ----------------------------------------------------------
class CallCounter:
    """Counts every botocore API call (service, operation) while ``on``, with the payload sizes that
    billing needs: SQS send bodies (billed per 64 KB chunk of each call) and S3 PUT bodies."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.sqs_send_billed = 0
        self.sqs_send_bytes = 0
        self.put_bytes = 0
        self.on = False
        import botocore.client

        original = botocore.client.BaseClient._make_api_call
        counter = self

        def counted(client: Any, operation: str, params: dict[str, Any]) -> Any:
            if counter.on and threading.current_thread().name != "opslake-checkpoints":
                service = client.meta.service_model.service_name
                counter.calls[f"{service}:{operation}"] += 1
                if operation in ("SendMessageBatch", "SendMessage"):
                    entries = params.get("Entries") or [params]
                    size = sum(len(str(e.get("MessageBody", "")).encode()) for e in entries)
                    counter.sqs_send_bytes += size
                    counter.sqs_send_billed += cost_model.sqs_billed_requests(size)
                if operation == "PutObject":
                    body = params.get("Body", b"")
                    counter.put_bytes += len(body) if isinstance(body, bytes | str) else 0
            return original(client, operation, params)

        botocore.client.BaseClient._make_api_call = counted  # type: ignore[method-assign]

    @contextmanager
    def counting(self) -> Iterator[None]:
        self.on = True
        try:
            yield
        finally:
            self.on = False

    def snapshot(self) -> dict[str, Any]:
        return {
            "calls": dict(self.calls),
            "sqs_send_billed": self.sqs_send_billed,
            "sqs_send_bytes": self.sqs_send_bytes,
            "put_bytes": self.put_bytes,
        }

    def reset(self) -> None:
        self.calls.clear()
        self.sqs_send_billed = self.sqs_send_bytes = self.put_bytes = 0


@contextmanager
def stdout_bytes(out: list[bytes]) -> Iterator[None]:
    """Everything written to file descriptor 1 meanwhile (Powertools' log lines and EMF blobs go
    to stdout, as in Lambda, where CloudWatch Logs ingests them), appended to ``out``."""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            out.append(sink.read())


def emf_metrics(blobs: list[bytes]) -> set[str]:
    """Distinct (namespace, metric, dimension set) in the EMF lines printed: each is one custom
    metric CloudWatch bills per month."""
    found: set[str] = set()
    for blob in blobs:
        for line in blob.splitlines():
            if b'"_aws"' not in line:
                continue
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            for directive in doc["_aws"].get("CloudWatchMetrics", []):
                for dims in directive.get("Dimensions", [[]]):
                    values = ",".join(f"{d}={doc.get(d)}" for d in dims)
                    for metric in directive.get("Metrics", []):
                        found.add(f"{directive.get('Namespace')}/{metric['Name']}[{values}]")
    return found


def ops_per_request(rate: float, clients: int, flush_s: float = 1.0, max_ops: int = 500) -> int:
    """Ops in one ``POST /events`` of the SDK: each of ``clients`` runtimes flushes every
    ``flush_s`` seconds (or at ``max_ops``)."""
    return max(1, min(max_ops, round(rate / clients * flush_s)))


# ---- part: ingest and writer ---------------------------------------------------------------------
def make_ops(count: int, texts: tuple[list[str], list[tuple[str, str]]], seed: int) -> list[dict[str, Any]]:
    """Ops as bench_load's fleet sends them (AWS's own error and request texts, UUID op ids)."""
    import random

    errors, inputs = texts
    rng = random.Random(seed)
    ops = []
    for i in range(count):
        endpoint, summary = rng.choice(inputs)
        op: dict[str, Any] = {
            "op_id": str(uuid.UUID(int=rng.getrandbits(128))),
            "endpoint": endpoint,
            "success": rng.random() >= 0.2,
            "duration_ms": round(rng.uniform(2, 4000), 1),
            "agent_id": f"agent-{seed % 10}",
            "session_id": f"agent-{seed % 10}-s{i // 50}",
            "input_summary": summary,
            "attributes": {"attempt": str(i % 3), "region": "us-east-1"},
        }
        if not op["success"]:
            op["error"] = rng.choice(errors)
        ops.append(op)
    return ops


def part_ingest(rates: list[int], clients: int) -> dict[str, Any]:
    from bench_load import corpus

    from opslake_local.drain import sqs_record
    from opslake_local.http import HttpRequest, build_event
    from opslake_local.stack import LocalStack

    counter = CallCounter()
    texts = corpus(120)
    results: dict[str, Any] = {}
    # the template's own environment (log level INFO, metrics on): their output is what Logs bills
    with LocalStack(ROOT / "template.yaml", env_overrides={"POWERTOOLS_METRICS_DISABLED": "false"}) as stack:
        invoker = stack.invoker()
        template = stack.template
        route = next(r for r in template.api_routes() if r.path == "/events" and r.method.upper() == "POST")
        source = next(s for s in template.sqs_sources() if s.function == "WriterFunction")
        stage = template.api_stage(route.api_id)
        assert stack.api_key is not None
        sqs = stack.client("sqs")
        url = stack.queue_url(source.queue)
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

        def post(ops: list[dict[str, Any]]) -> tuple[float, int, bytes]:
            body = json.dumps({"ops": ops}).encode()
            request = HttpRequest(
                "POST", "/events", [("content-type", "application/json"), ("x-api-key", stack.api_key.value)],  # type: ignore[union-attr]
                body, "127.0.0.1",
            )  # fmt: skip
            event = build_event(request, route, {}, stage=stage, api_key=stack.api_key)
            printed: list[bytes] = []
            with counter.counting(), stdout_bytes(printed):
                started = time.perf_counter()
                answer = invoker.invoke(route.function, event)
                took = time.perf_counter() - started
            assert answer["statusCode"] == 202, answer
            return took, len(body), printed[0]

        def take_queue() -> list[dict[str, Any]]:
            """Receive and delete what is queued (the harness, not counted), so moto's queue stays
            short (its send cost grows with depth) and the writer gets these messages later."""
            got: list[dict[str, Any]] = []
            while True:
                batch = sqs.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=10,
                    MessageSystemAttributeNames=["All"],
                    WaitTimeSeconds=0,
                ).get("Messages", [])
                if not batch:
                    return got
                got += batch
                sqs.delete_message_batch(
                    QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)]
                )  # fmt: skip

        post(make_ops(1, texts, 999))  # cold start, not measured
        take_queue()
        for n, rate in enumerate(rates):
            k = ops_per_request(rate, clients)
            window_ops = rate * source.window_s
            counter.reset()
            durations: list[float] = []
            bodies: list[int] = []
            printed: list[bytes] = []
            messages: list[dict[str, Any]] = []
            payload = 0
            # as many requests as the writer's batch at this rate holds (at least 30)
            while True:
                took, size, out = post(make_ops(k, texts, n * 100_000 + len(durations)))
                durations.append(took)
                bodies.append(size)
                printed.append(out)
                for m in take_queue():
                    record = sqs_record(m, queue_arn=arn, region=stack.region)
                    payload += len(json.dumps(record).encode())
                    messages.append(record)
                ops_in = len(durations) * k
                if len(durations) >= 30 and (
                    ops_in >= window_ops
                    or payload >= LAMBDA_PAYLOAD_MAX
                    or len(messages) >= source.batch_size
                ):
                    break
            ingest_calls = counter.snapshot()
            # the writer's event: what fits the mapping's limits
            records, size = [], 0
            for record in messages:
                record_bytes = len(json.dumps(record).encode())
                if size + record_bytes > LAMBDA_PAYLOAD_MAX or len(records) >= source.batch_size:
                    break
                records.append(record)
                size += record_bytes
            batch_ops = sum(len(r["body"].splitlines()) for r in records)  # packed: one op per line
            if n == 0:  # the writer's cold start (imports, the hour's partition registered), not measured
                with stdout_bytes([]):
                    invoker.invoke(source.function, {"Records": records[:1]})
            counter.reset()
            writer_out: list[bytes] = []
            with counter.counting(), stdout_bytes(writer_out):
                started = time.perf_counter()
                result = invoker.invoke(source.function, {"Records": records})
                writer_s = time.perf_counter() - started
            assert not (result or {}).get("batchItemFailures"), result
            writer_calls = counter.snapshot()
            metrics = emf_metrics(printed + writer_out)
            results[str(rate)] = {
                "ops_per_request": k,
                "requests_measured": len(durations),
                "ingest_duration_s_median": statistics.median(durations),
                "ingest_duration_s_p95": sorted(durations)[int(len(durations) * 0.95) - 1],
                "request_body_bytes_mean": statistics.mean(bodies),
                "ingest_log_bytes_mean": statistics.mean(len(b) for b in printed),
                "ingest_calls": ingest_calls,
                "messages_per_request": len(messages) / len(durations),
                "writer_batch_messages": len(records),
                "writer_batch_ops": batch_ops,
                "writer_batch_payload_bytes": size,
                "writer_duration_s": writer_s,
                "writer_log_bytes": len(writer_out[0]),
                "writer_calls": writer_calls,
                "parquet_bytes_per_op": writer_calls["put_bytes"] / max(batch_ops, 1),
                "emf_metrics": sorted(metrics),
            }
            print(f"  {rate:>5} ops/s: {k} ops/request, ingest median {statistics.median(durations) * 1000:.1f} ms "
                  f"over {len(durations)} requests; writer {batch_ops:,} ops in {len(records)} messages "
                  f"{writer_s * 1000:.0f} ms", file=sys.stderr, flush=True)  # fmt: skip
        results["template"] = template_facts(template)
    return results


def template_facts(template: Any) -> dict[str, Any]:
    """What the bill depends on, read from template.yaml (never restated here)."""
    functions = {
        lid: {"memory_mb": f.memory_mb, "timeout_s": f.timeout_s} for lid, f in template.functions().items()
    }
    globals_ = template._function_globals()
    schedules: dict[str, float] = {}
    tracing = globals_.get("Tracing") == "Active"
    for lid, resource in template.of_type("AWS::Serverless::Function").items():
        for event in (resource.get("Properties", {}).get("Events") or {}).values():
            if event.get("Type") == "Schedule":
                expression = event["Properties"]["Schedule"]
                number, unit = expression[len("rate(") : -1].split()
                seconds = int(number) * {"minute": 60, "minutes": 60, "hour": 3600, "hours": 3600}[unit]
                schedules[lid] = cost_model.SECONDS_PER_DAY / seconds
    buckets = template.buckets()
    sse = [
        rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"]
        for b in buckets.values()
        for rule in b.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [])
    ]
    queue_kms = any("KmsMasterKeyId" in template.properties(q) for q in template.of_type("AWS::SQS::Queue"))
    apis = template.of_type(
        "AWS::Serverless::Api",
        "AWS::Serverless::HttpApi",
        "AWS::ApiGateway::RestApi",
        "AWS::ApiGatewayV2::Api",
    )
    api_type = (
        "HTTP"
        if any(r["Type"] in ("AWS::Serverless::HttpApi", "AWS::ApiGatewayV2::Api") for r in apis.values())
        else "REST"
    )
    access_log = ""
    for resource in apis.values():
        access_log = (resource.get("Properties", {}).get("AccessLogSetting") or {}).get(
            "Format", ""
        ) or access_log
    alarms = template.of_type("AWS::CloudWatch::Alarm").values()
    return {
        "functions": functions,
        # an alarm is billed per metric it reads: one, or each MetricStat of its metric math
        "alarm_metrics": sum(
            1
            if "MetricName" in a["Properties"]
            else sum("MetricStat" in q for q in a["Properties"]["Metrics"])
            for a in alarms
        ),
        "dashboards": len(template.of_type("AWS::CloudWatch::Dashboard")),
        "architecture": (globals_.get("Architectures") or ["x86_64"])[0],
        "schedules_per_day": schedules,
        "tracing": tracing,
        "api_type": api_type,
        "bucket_sse": sse,
        "kms": any(a.startswith("aws:kms") for a in sse) or queue_kms,
        "log_retention_days": int(template.ref("LogRetentionDays")),
        # each $context variable replaced by a typical 24-character value
        "api_access_log_bytes": len(_context_vars(access_log)),
    }


def _context_vars(fmt: str) -> str:
    import re

    return re.sub(r"\$context\.[A-Za-z.]+", "x" * 24, " ".join(fmt.split()))


# ---- part: jobs ----------------------------------------------------------------------------------
def part_jobs(n_ops: int) -> dict[str, Any]:
    from bench_analyzer import ANSWER, START, lake_files, peak_rss_mb, upload

    from opslake.analysis.diagnoser import Diagnoser
    from opslake.config import load_settings
    from opslake.jobs.analyzer import Analyzer
    from opslake.jobs.consolidator import Consolidator
    from opslake.jobs.lease import StateStore
    from opslake.lake.store import S3ObjectStore
    from opslake.llm import LlmClient, LlmConfig
    from opslake.query.embedded import EmbeddedEngine
    from opslake_local.stack import LocalStack
    from tests.fake_llm import FakeLlm

    counter = CallCounter()
    folder = lake_files(n_ops, Path("/tmp/opslake-bench-analyzer"))
    out: dict[str, Any] = {"ops_per_day": n_ops}
    env = {"OPSLAKE_QUERY_ENGINE": "embedded", "POWERTOOLS_METRICS_DISABLED": "false"}
    with LocalStack(ROOT / "template.yaml", env_overrides=env) as stack, FakeLlm() as llm_api:
        llm_api.default = FakeLlm.answer(ANSWER)
        upload(stack, folder)
        base = load_settings().model_copy(update={"analyzer_settle_s": 0.0})
        s3, glue = stack.client("s3"), stack.client("glue")

        def analyzer(now: Any, lookback_h: float) -> Analyzer:
            settings = base.model_copy(update={"analyzer_initial_lookback_h": lookback_h})
            return Analyzer(
                settings=settings,
                engine=EmbeddedEngine.from_settings(settings),
                store=S3ObjectStore(s3, settings.lake_bucket),
                state=StateStore(s3, settings.lake_bucket, settings.analyzer_state_key, lease_s=600, clock=lambda: now),
                diagnoser=Diagnoser(LlmClient(LlmConfig(base_url=llm_api.base_url, model="fake-model"))),
                clock=lambda: now,
                glue=glue,
            )  # fmt: skip

        def measured(label: str, job: Any) -> dict[str, Any]:
            counter.reset()
            seen = len(llm_api.requests)
            printed: list[bytes] = []
            with counter.counting(), stdout_bytes(printed):
                started = time.perf_counter()
                report = job.run()
                took = time.perf_counter() - started
            prompts = [
                sum(len(str(m.get("content", ""))) for m in (r.body.get("messages") or []))
                for r in llm_api.requests[seen:]
                if isinstance(r.body, dict)
            ]
            result = {
                "duration_s": took,
                "status": report.status,
                "queries": report.queries,
                "bytes_scanned": report.bytes_scanned or 0,
                "llm_calls": getattr(report, "llm_calls", 0),
                "prompt_chars": prompts,
                "log_bytes": len(printed[0]),
                "calls": counter.snapshot()["calls"],
                "emf_metrics": sorted(emf_metrics(printed)),
            }
            print(f"  {label}: {took:.2f} s, {report.queries} queries, {(report.bytes_scanned or 0) / 1e6:.1f} MB, "
                  f"{len(prompts)} model calls", file=sys.stderr, flush=True)  # fmt: skip
            return result

        day_end = START + timedelta(hours=24)
        # catch-up over the day but its last 10 minutes (a new deployment's first run), then the
        # runs the schedule makes every 5 minutes: the third is the steady figure
        # (the catch-up diagnoses at most the budget; the next run, the rest of the day's new signatures)
        out["analyzer_first"] = measured(
            "analyzer, first run", analyzer(day_end - timedelta(minutes=10), 23.9)
        )
        out["analyzer_second"] = measured(
            "analyzer, the next run", analyzer(day_end - timedelta(minutes=5), 23.9)
        )
        out["analyzer"] = measured("analyzer, a steady 5-minute run", analyzer(day_end, 23.9))
        out["analyzer_peak_rss_mb"] = peak_rss_mb()

        def consolidator(now: Any, window_h: float) -> Consolidator:
            settings = base.model_copy(update={"consolidator_max_window_h": window_h})
            return Consolidator(
                settings=settings,
                engine=EmbeddedEngine.from_settings(settings),
                store=S3ObjectStore(s3, settings.lake_bucket),
                state=StateStore(s3, settings.lake_bucket, settings.consolidator_state_key, lease_s=1800, clock=lambda: now),
                compactor=None,
                clock=lambda: now,
            )  # fmt: skip

        # first over the whole day (like the analyzer's first run: the second point of the time
        # per op read), then the steady run over the schedule's 30 minutes
        out["consolidator_first"] = measured(
            "consolidator, first run over the day", consolidator(day_end - timedelta(minutes=30), 24.5)
        )
        out["consolidator"] = measured("consolidator, a 30-minute run", consolidator(day_end, 0.5))
        out["peak_rss_mb"] = peak_rss_mb()
    return out


# ---- part: compaction ----------------------------------------------------------------------------
def part_compaction(files: int, rows_per_file: int) -> dict[str, Any]:
    import bench_compaction as bc  # sets its environment on import: this part runs alone
    import boto3
    from moto import mock_aws

    from opslake.lake.compaction import CompactionOptions, Compactor

    counter = CallCounter()
    with mock_aws():
        s3, glue = boto3.client("s3"), boto3.client("glue")
        bc.setup(s3, glue)
        rows, size = bc.fill(s3, glue, files, rows=(rows_per_file, rows_per_file))
        now = [bc.HOUR + timedelta(hours=4)]
        options = CompactionOptions()
        compactor = Compactor(
            s3, glue, bucket=bc.BUCKET, database=bc.DATABASE, clock=lambda: now[0], options=options
        )
        counter.reset()
        with counter.counting():
            started = time.perf_counter()
            report = compactor.run()
            compact_s = time.perf_counter() - started
            now[0] += timedelta(seconds=options.grace_s + 1)
            started = time.perf_counter()
            compactor.run()
            delete_s = time.perf_counter() - started
        totals = report.to_dict()
    return {
        "files": files,
        "rows": rows,
        "bytes_in": size,
        "bytes_out": totals["bytes_out"],
        "rows_out": totals["rows_out"],
        "duration_s": compact_s + delete_s,
        "calls": counter.snapshot()["calls"],
    }


# ---- the model's inputs from the measurements ----------------------------------------------------
def _calls(calls: dict[str, int], *names: str) -> int:
    return sum(n for k, n in calls.items() if k.split(":", 1)[1] in names)


def _service(calls: dict[str, int], service: str) -> int:
    return sum(n for k, n in calls.items() if k.split(":", 1)[0] == service)


S3_PUT_CLASS = ("PutObject", "CopyObject", "ListObjectsV2", "ListObjects", "CreateMultipartUpload",
                "UploadPart", "CompleteMultipartUpload", "ListObjectVersions")  # fmt: skip
S3_GET_CLASS = ("GetObject", "HeadObject")


def model_inputs(measured: dict[str, Any], rate: float) -> dict[str, Any]:
    """The per-request, per-batch and per-run figures cost_model.daily_cost takes, at ``rate``."""
    ingest = measured["ingest"][str(rate)]
    facts = measured["ingest"]["template"]
    jobs_m, comp = measured["jobs"], measured["compaction"]
    functions = facts["functions"]
    per_day = facts["schedules_per_day"]
    requests = ingest["requests_measured"]
    batch_ops = ingest["writer_batch_ops"]
    batch_msgs = ingest["writer_batch_messages"]
    measured_rate = jobs_m["ops_per_day"] / cost_model.SECONDS_PER_DAY
    wc = ingest["writer_calls"]["calls"]
    files_per_hour = 3600 * rate / batch_ops  # one object per batch (and partition)
    hour_ops = jobs_m["ops_per_day"] / 24  # a steady run reads the current hour's partition

    def job(name: str, function: str) -> dict[str, Any]:
        steady, whole_day = jobs_m[name], jobs_m[f"{name}_first"]
        queries = max(steady["queries"], 0)
        # two measured points: the steady run (one hour's partition) and the first run (the whole
        # day's 24): the time per op read between them, applied to the hour at this rate
        per_op = max(
            0.0, (whole_day["duration_s"] - steady["duration_s"]) / (jobs_m["ops_per_day"] - hour_ops)
        )
        return {
            "runs_per_day": per_day[function],
            "duration_s": steady["duration_s"] + per_op * max(0.0, rate * 3600 - hour_ops),
            "memory_mb": functions[function]["memory_mb"],
            "queries": queries,
            "bytes_per_query": steady["bytes_scanned"] / max(queries, 1),
            # Athena reads the hour partition's objects (the writer's, until compaction)
            "athena_gets_per_query": files_per_hour * ASSUMED["athena_gets_per_query_per_file"],
            "s3_puts": _calls(steady["calls"], *S3_PUT_CLASS),
            "s3_gets": _calls(steady["calls"], *S3_GET_CLASS),
            "glue_calls": _service(steady["calls"], "glue"),
            "log_bytes": steady["log_bytes"] + PLATFORM_LOG_BYTES,
        }

    # compaction runs inside the consolidator, once per closed hour: its own duration and calls
    comp_rows_scale = rate * 3600 / max(comp["rows"], 1)
    compaction = {
        "runs_per_day": 24,
        "duration_s": comp["duration_s"] * max(1.0, comp_rows_scale),
        "memory_mb": functions["ConsolidatorFunction"]["memory_mb"],
        "queries": 0,
        "bytes_per_query": 0,
        "athena_gets_per_query": 0,
        "s3_puts": _calls(comp["calls"], *S3_PUT_CLASS),
        # one GET per writer file of the hour, plus its own (journal, verification)
        "s3_gets": files_per_hour + _calls(comp["calls"], *S3_GET_CLASS) - comp["files"],
        "glue_calls": _service(comp["calls"], "glue"),
        "log_bytes": 0,
        "scales_with_ops": False,
    }
    writer_bpo = ingest["parquet_bytes_per_op"]
    # compaction's ratio on its lake applied to these ops' bytes (its synthetic rows repeat more)
    compacted_bpo = writer_bpo * comp["bytes_out"] / max(comp["bytes_in"], 1)
    diagnosed = [
        c for run in ("analyzer_first", "analyzer_second", "analyzer") for c in jobs_m[run]["prompt_chars"]
    ]
    metrics = (
        set(ingest["emf_metrics"])
        | set(jobs_m["analyzer"]["emf_metrics"])
        | set(jobs_m["consolidator"]["emf_metrics"])
    )
    return {
        "architecture": facts["architecture"],
        "api_type": facts["api_type"],
        "tracing": facts["tracing"],
        "log_retention_days": facts["log_retention_days"],
        "ops_per_request": ingest["ops_per_request"],
        "ingest_duration_s": ingest["ingest_duration_s_median"],
        "ingest_memory_mb": functions["EventsFunction"]["memory_mb"],
        "ingest_log_bytes": ingest["ingest_log_bytes_mean"] + PLATFORM_LOG_BYTES,
        "api_access_log_bytes": facts["api_access_log_bytes"],
        "sqs_send_billed_per_request": ingest["ingest_calls"]["sqs_send_billed"] / requests,
        "writer_batch_ops": batch_ops,
        "writer_duration_s": ingest["writer_duration_s"],
        "writer_memory_mb": functions["WriterFunction"]["memory_mb"],
        "writer_log_bytes": ingest["writer_log_bytes"] + PLATFORM_LOG_BYTES,
        # the mapping receives 10 messages a call, each call billed per 64 KB of what it returns
        "sqs_receive_billed_per_batch": max(
            math.ceil(batch_msgs / SQS_RECEIVE_MAX),
            math.ceil(ingest["writer_batch_payload_bytes"] / cost_model.SQS_CHUNK_BYTES),
        ),
        "sqs_delete_per_batch": math.ceil(batch_msgs / SQS_RECEIVE_MAX),
        "sqs_idle_polls_per_day": ASSUMED["sqs_idle_polls_per_day"],
        "s3_puts_per_batch": _calls(wc, *S3_PUT_CLASS),
        "glue_calls_per_batch": _service(wc, "glue"),
        "glue_calls_per_athena_query": ASSUMED["glue_calls_per_athena_query"],
        "jobs_measured_rate": measured_rate,
        "jobs": {
            "analyzer": job("analyzer", "AnalyzerFunction"),
            "consolidator": job("consolidator", "ConsolidatorFunction"),
            "compaction": compaction,
        },
        "stored_bytes_per_op_day": ASSUMED["lake_days"] * compacted_bpo
        + ASSUMED["noncurrent_days"] * writer_bpo,
        "custom_metrics": len(metrics),
        "alarm_metrics": facts["alarm_metrics"],
        "dashboards": facts["dashboards"],
        "kms_requests_per_op": 0.0 if not facts["kms"] else 1.0 / batch_ops,
        # model calls: a day whose failure modes are all new, each diagnosed once (the planted
        # day's 40); the number of modes, not of ops, sets it
        "llm_calls_per_day": len(diagnosed),
        "llm_input_tokens_per_call": (statistics.mean(diagnosed) if diagnosed else 0)
        / ASSUMED["chars_per_token"],
        "llm_output_tokens_per_call": ASSUMED["llm_output_tokens_per_call"],
    }


# ---- output --------------------------------------------------------------------------------------
def report(measured: dict[str, Any], ops_per_trace: float) -> dict[str, Any]:
    rates = [int(r) for r in measured["ingest"] if r != "template"]
    out: dict[str, Any] = {"rates": {}, "prices": cost_model.PRICES, "assumed": ASSUMED, "peers": {}}
    for rate in rates:
        key = str(rate)
        inputs = model_inputs(measured, rate)
        costs = cost_model.daily_cost(rate, inputs, cost_model.PRICES)
        total = sum(costs.values())
        ops_day = rate * cost_model.SECONDS_PER_DAY
        out["rates"][key] = {
            "inputs": inputs,
            "dollars_per_day": costs,
            "total_per_day": total,
            "per_million_ops": total / ops_day * 1e6,
        }
        out["peers"][key] = {
            name: cost_model.peer_daily(rate, peer, ops_per_trace) for name, peer in cost_model.PEERS.items()
        }
    return out


def print_table(result: dict[str, Any], ops_per_trace: float) -> None:
    rates = list(result["rates"])
    print("\ndollars per day (us-east-1 list prices, no free tier)")
    services = list(next(iter(result["rates"].values()))["dollars_per_day"])
    print("| service | " + " | ".join(f"{r} ops/s" for r in rates) + " |")
    print("|---|" + "---:|" * len(rates))
    for service in services:
        print(
            f"| {service} | "
            + " | ".join(f"{result['rates'][r]['dollars_per_day'][service]:,.2f}" for r in rates)
            + " |"
        )
    print(
        "| **total per day** | "
        + " | ".join(f"**{result['rates'][r]['total_per_day']:,.2f}**" for r in rates)
        + " |"
    )
    print(
        "| **per million ops** | "
        + " | ".join(f"**{result['rates'][r]['per_million_ops']:,.3f}**" for r in rates)
        + " |"
    )
    print(
        "\nhosted peers at the same volume, dollars per day "
        f"(1 op = 1 span/observation/log; 1 trace = {ops_per_trace:g} ops)"
    )
    print("| peer | " + " | ".join(f"{r} ops/s" for r in rates) + " | billing unit | price basis |")
    print("|---|" + "---:|" * len(rates) + "---|---|")
    for name, peer in cost_model.PEERS.items():
        print(f"| {name} | " + " | ".join(f"{result['peers'][r][name]:,.2f}" for r in rates)
              + f" | {peer['billing_unit']} | {peer['basis']}, {peer['as_of']} |")  # fmt: skip
    print("\nprices used")
    print("| item | price | unit | basis | as of |")
    print("|---|---:|---|---|---|")
    for name, p in cost_model.PRICES.items():
        print(f"| {name} | {p['price']:.10g} | {p['unit']} | {p['basis']} | {p['as_of']} |")


def run_part(args: list[str]) -> dict[str, Any]:
    """One part in a fresh process (its own moto, its own memory); its JSON is the last line."""
    env = {**os.environ, "PYTHONPATH": ""}
    done = subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True, env=env
    )
    sys.stderr.write(done.stderr[-4000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--clients", type=int, default=10, help="SDK runtimes sending the ops (each flushes every 1 s)"
    )
    parser.add_argument(
        "--ops-per-trace", type=float, default=10, help="ops in one peer 'trace' (an agent run)"
    )
    parser.add_argument("--jobs-ops", type=int, default=1_000_000, help="ops per day of the jobs' lake")
    parser.add_argument("--json", type=Path, help="write the measurements and the result here")
    parser.add_argument("--measured", type=Path, help="re-price a --json file's measurements (no measuring)")
    parser.add_argument("--part", choices=("ingest", "jobs", "compaction"), help=argparse.SUPPRESS)
    parser.add_argument("--rates", type=int, nargs="+", default=list(RATES))
    args = parser.parse_args()
    if args.part == "ingest":
        print(json.dumps(part_ingest(args.rates, args.clients)))
        return
    if args.part == "jobs":
        print(json.dumps(part_jobs(args.jobs_ops)))
        return
    if args.part == "compaction":
        hourly = args.jobs_ops / 24
        files = round(3600 / 60)  # one writer object per 60 s batching window at this volume
        print(json.dumps(part_compaction(files, round(hourly / files))))
        return
    if args.measured:
        measured = json.loads(args.measured.read_text())["measured"]
        # the template's facts as they are now (a re-price follows template.yaml's alarms, memory, …)
        from opslake_local.template import Template, find_template

        measured["ingest"]["template"] = template_facts(Template(find_template(ROOT)))
    else:
        started = time.perf_counter()
        rates = [str(r) for r in args.rates]
        measured = {
            "ingest": run_part(["--part", "ingest", "--clients", str(args.clients), "--rates", *rates]),
            "jobs": run_part(["--part", "jobs", "--jobs-ops", str(args.jobs_ops)]),
            "compaction": run_part(["--part", "compaction", "--jobs-ops", str(args.jobs_ops)]),
            "clients": args.clients,
            "measured_s": 0.0,
            "machine": f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end",
        }
        measured["measured_s"] = time.perf_counter() - started
    result = report(measured, args.ops_per_trace)
    print_table(result, args.ops_per_trace)
    print("\nassumed (not measured):", json.dumps(ASSUMED))
    if args.json:
        args.json.write_text(json.dumps({"measured": measured, "result": result}, indent=1, default=str))


if __name__ == "__main__":
    main()
