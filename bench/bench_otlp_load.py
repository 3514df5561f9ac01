"""An OpenTelemetry fleet on the local stack: agent runtimes export GenAI spans to POST /v1/traces.

Starts the local stack as bench_load.py does (moto server from template.yaml, the API's functions
in ``--containers`` processes behind the local HTTP API, the background SQS → writer drainer, the
scheduler), then ``--clients`` client processes, each an agent runtime with the OpenTelemetry
Python SDK as a fleet configures it: a ``TracerProvider`` (``service.name`` per client), a
``BatchSpanProcessor`` with the SDK's defaults (queue 2,048, 512 spans per export, 5 s schedule
delay: at this volume the queue reaches 512 long before the delay, so every export is a full
batch) and the ``OTLPSpanExporter`` (protobuf, gzip, ``x-api-key``) pointed at the stack's
``/v1/traces``. Each records seeded agent runs (bench_otlp.py's ``Runs``: ``invoke_agent`` →
``chat``/``execute_tool`` ×3–8, some failing with a recorded exception, a quarter OpenInference
``AGENT``/``LLM``/``TOOL``, beside the plain HTTP client spans that are not ops; their texts cut from
one seeded text of the same vocabulary) as fast as the exporter takes them: a runtime records its
next run whenever its processor's queue has room for it (so a drop would be the SDK's, never the
generator outrunning a full queue), for ``--seconds``.
Then the providers shut down (their last batches flushed), the drainer empties the queue (at most
``--drain-timeout`` s) and every Parquet object under ``ops/`` is read back.

Reports spans exported/s and ops stored/s, the exporter's latency (each HTTP request, timed in a
``requests.Session`` handed to the exporter, and each ``export`` call: encode, gzip, retries), its
failures and retries (the SDK's own log records), the processors' queue depth over time (spans
ended minus spans handed to the exporter, sampled every ``--sample-s``), the SQS queue, the
stack's CPU per span and its memory, and exactly once: every op-shaped span of a successful export
(a GenAI operation or an OpenInference kind, or an ERROR status) is counted by its op id
(``<trace id>:<span id>``) in the raw Parquet rows, before any dedupe (lost = 0 copies,
duplicated = more than one), and no skipped span (the HTTP client spans) was stored.

Loopback only, bounded in time; prints figures and asserts nothing (CI never runs it).

    .venv/bin/python bench/bench_otlp_load.py [--seconds 60] [--clients 4] [--containers 2]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "common"), str(ROOT / "local"), str(ROOT / "bench")]

import requests  # noqa: E402
from bench_load import _percentile, _rss_mb, load_arguments, load_stack  # noqa: E402
from bench_otlp import WORDS, Runs, SeededIds  # noqa: E402
from openinference.semconv.trace import SpanAttributes as OpenInference  # noqa: E402
from opentelemetry.exporter.otlp.proto.http import Compression  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult  # noqa: E402
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai  # noqa: E402
from opentelemetry.semconv.attributes import service_attributes  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

TRACES_PATH = "/v1/traces"
MAX_QUEUE = 2048  # the SDK's default OTEL_BSP_MAX_QUEUE_SIZE, named here for the generator's pause
#: A run is recorded only while the queue has this much room (a run makes at most 1 + 8 + 4 spans).
RUN_ROOM = 64
#: A run starts this long before the wall clock: its spans' timestamps (explicit, seeded durations
#: of up to ~30 s in all) end near now, as a run that just finished.
RUN_BACKDATE_NS = 30 * 10**9
CORPUS_WORDS = 100_000  # ~700 KB of text that the runs' texts are cut from


def op_shaped(span: ReadableSpan) -> bool:
    """Whether the route should store this span (the README's rule, read independently of the route's
    code): a GenAI operation, an OpenInference span kind, or an ERROR status."""
    attributes = span.attributes or {}
    return (
        gen_ai.GEN_AI_OPERATION_NAME in attributes
        or OpenInference.OPENINFERENCE_SPAN_KIND in attributes
        or span.status.status_code is StatusCode.ERROR
    )


def op_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}:{span.context.span_id:016x}"


@dataclass
class ClientResult:
    """What one runtime saw. Times are wall clock (``time.time()``), durations seconds."""

    ended: int = 0
    exports: list[tuple[float, float, int, bool]] = field(default_factory=list)  # end, took, spans, ok
    requests: list[tuple[float, float, int | None]] = field(default_factory=list)  # end, took, status
    stored_header: int = 0  # x-opslake-spans-stored, summed over 200s
    skipped_header: int = 0
    rejected: int = 0  # partial_success.rejected_spans
    rejections: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)  # op-shaped spans of successful exports
    skipped: list[str] = field(default_factory=list)  # other spans of successful exports
    failed: list[str] = field(default_factory=list)  # every span of a failed export
    depth: list[tuple[float, int]] = field(default_factory=list)
    logs: Counter[str] = field(default_factory=Counter)  # the SDK's warnings and errors by template
    log_samples: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    runs: int = 0


class TimedSession(requests.Session):
    """The exporter's HTTP session: times each request and reads opslake's answer."""

    def __init__(self, result: ClientResult) -> None:
        super().__init__()
        self.result = result

    def request(self, method: str, url: Any, *args: Any, **kwargs: Any) -> requests.Response:
        started = time.perf_counter()
        try:
            response = super().request(method, url, *args, **kwargs)
        except Exception:
            self.result.requests.append((time.time(), time.perf_counter() - started, None))
            raise
        self.result.requests.append((time.time(), time.perf_counter() - started, response.status_code))
        if response.status_code == 200:
            self.result.stored_header += int(response.headers.get("x-opslake-spans-stored", 0))
            self.result.skipped_header += int(response.headers.get("x-opslake-spans-skipped", 0))
            if response.content:
                partial = ExportTraceServiceResponse.FromString(response.content).partial_success
                if partial.rejected_spans:
                    self.result.rejected += partial.rejected_spans
                    self.result.rejections.append(partial.error_message[:300])
        return response


class TimedExporter(OTLPSpanExporter):
    """The SDK's exporter, counting the spans the processor hands it and timing each export."""

    def __init__(self, result: ClientResult, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.result = result
        self.taken = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.taken += len(spans)
        started = time.perf_counter()
        outcome = super().export(spans)
        ok = outcome is SpanExportResult.SUCCESS
        self.result.exports.append((time.time(), time.perf_counter() - started, len(spans), ok))
        for span in spans:
            kept = (self.result.ops if op_shaped(span) else self.result.skipped) if ok else self.result.failed
            kept.append(op_id(span))
        return outcome


class Ended(SpanProcessor):
    """Counts the spans the runtime ended (the processor's queue depth is ended − taken)."""

    def __init__(self, result: ClientResult) -> None:
        self.result = result

    def on_end(self, span: ReadableSpan) -> None:
        self.result.ended += 1


class SdkLog(logging.Handler):
    """The SDK's own warnings and errors (retries, failed exports, a full queue), by template."""

    def __init__(self, result: ClientResult) -> None:
        super().__init__(logging.WARNING)
        self.result = result

    def emit(self, record: logging.LogRecord) -> None:
        self.result.logs[str(record.msg)[:80]] += 1
        if len(self.result.log_samples) < 5:
            self.result.log_samples.append(record.getMessage()[:300])


class FleetRuns(Runs):
    """bench_otlp.py's seeded agent runs, recorded by a runtime's own provider at wall-clock time."""

    def __init__(self, seed: int, provider_for: Any) -> None:
        super().__init__(seed)
        self.corpus = " ".join(self.rng.choice(WORDS) for _ in range(CORPUS_WORDS))
        self.provider = provider_for(SeededIds(self.rng))
        self.tracer = self.provider.get_tracer("opentelemetry.instrumentation.openai_agents", "0.1.0")

    def text(self, low: int, high: int) -> str:
        """Like ``Runs.text`` (words of the same vocabulary, a seeded length) but cut from one long
        seeded text, not drawn word by word: the generator's CPU is taken from the machine the stack
        runs on, and a real runtime spends none on making up its texts."""
        size = self.rng.randint(low, high)
        start = self.corpus.find(" ", self.rng.randrange(len(self.corpus) - size - 64)) + 1
        return self.corpus[start : start + size]

    def run(self) -> None:
        self.clock = time.time_ns() - RUN_BACKDATE_NS
        self.openinference_run() if self.rng.random() < 0.25 else self.genai_run()


def client_run(index: int, endpoint: str, api_key: str, start_at: float, stop_at: float, seed: int,
               sample_s: float, processor: dict[str, int]) -> ClientResult:  # fmt: skip
    """One agent runtime: records runs while its queue has room, until ``stop_at``; then shuts down
    its provider (the last batches flushed, as at a process's exit)."""
    started_cpu = time.process_time()
    result = ClientResult()
    logging.getLogger("opentelemetry").addHandler(SdkLog(result))
    exporter = TimedExporter(
        result,
        endpoint=endpoint,
        headers={"x-api-key": api_key},
        compression=Compression.Gzip,
        session=TimedSession(result),
    )
    batch = BatchSpanProcessor(
        exporter,
        max_queue_size=MAX_QUEUE,
        schedule_delay_millis=processor.get("schedule_delay_millis"),
        max_export_batch_size=processor.get("max_export_batch_size"),
    )

    def provider_for(ids: SeededIds) -> TracerProvider:
        resource = Resource.create({service_attributes.SERVICE_NAME: f"otlp-fleet-runtime-{index}"})
        provider = TracerProvider(resource=resource, id_generator=ids)
        provider.add_span_processor(Ended(result))
        provider.add_span_processor(batch)
        return provider

    runs = FleetRuns(seed * 1000 + index, provider_for)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(sample_s):
            result.depth.append((time.time(), result.ended - exporter.taken))

    while time.time() < start_at:
        time.sleep(0.01)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    while time.time() < stop_at:
        if result.ended - exporter.taken > MAX_QUEUE - RUN_ROOM:
            time.sleep(0.002)  # the exporter is behind: wait for it, as fast as it takes spans
            continue
        runs.run()
        result.runs += 1
    runs.provider.shutdown()
    done.set()
    sampler.join()
    result.cpu_s = time.process_time() - started_cpu
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    load_arguments(parser)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--schedule-delay-ms", type=int, default=None, help="OTEL_BSP_SCHEDULE_DELAY (SDK: 5000)"
    )
    parser.add_argument(
        "--batch-size", type=int, default=None, help="OTEL_BSP_MAX_EXPORT_BATCH_SIZE (SDK: 512)"
    )
    args = parser.parse_args()
    processor = {
        name: value
        for name, value in (
            ("schedule_delay_millis", args.schedule_delay_ms),
            ("max_export_batch_size", args.batch_size),
        )
        if value is not None
    }

    import httpx

    with load_stack(args, ROOT, TRACES_PATH) as load:
        drainer, stack_pids, key = load.drainer, load.stack_pids, load.key
        warm = httpx.post(  # cold starts of the traces function happen before the clock starts
            f"{load.base_url}{TRACES_PATH}",
            content=b"",  # an empty ExportTraceServiceRequest: 200, nothing stored
            headers={"x-api-key": key, "content-type": "application/x-protobuf"},
            timeout=60,
        )
        assert warm.status_code == 200, warm.text
        rss_before = load.rss_mb()
        rss_each_before = [_rss_mb(pid) for pid in stack_pids]
        load_before = os.getloadavg()
        start_at = time.time() + 2.0  # the client processes import the SDK meanwhile
        stop_at = start_at + args.seconds
        load.queue.start(extra=load.rss_mb)  # samples: t, visible, in flight, stack RSS MB
        url = f"{load.base_url}{TRACES_PATH}"
        results, flushed, cpu_load = load.run_clients(
            client_run,
            [
                (i, url, key, start_at, stop_at, args.seed, args.sample_s, processor)
                for i in range(args.clients)
            ],
            start_at,
        )
        elapsed = flushed - start_at
        drained_at = load.drain(args.drain_timeout)
        rss_after = load.rss_mb()
        rss_each_after = [_rss_mb(pid) for pid in stack_pids]
        load.stop()
        samples = load.queue.samples

        exports = [e for r in results for e in r.exports]
        in_window = sum(n for end, _, n, ok in exports if ok and end <= stop_at)
        exported = sum(n for _, _, n, ok in exports if ok)
        ended = sum(r.ended for r in results)
        dropped = ended - sum(n for _, _, n, _ in exports)
        ops = [o for r in results for o in r.ops]
        skipped = [s for r in results for s in r.skipped]
        failed = [f for r in results for f in r.failed]
        stored_header = sum(r.stored_header for r in results)
        rejected = sum(r.rejected for r in results)
        requests_ = [q for r in results for q in r.requests]
        statuses = Counter(status for _, _, status in requests_)
        logs: Counter[str] = Counter()
        for r in results:
            logs.update(r.logs)
        client_cpu = sum(r.cpu_s for r in results)

        print(f"\nload: {args.clients} OpenTelemetry runtimes (BatchSpanProcessor {processor or 'SDK defaults'}, "
              f"OTLPSpanExporter protobuf + gzip), {args.seconds:g} s + the last flush "
              f"({elapsed:.1f} s in all)")  # fmt: skip
        print(f"  agent runs {sum(r.runs for r in results)}; spans ended {ended}, exported {exported} "
              f"({in_window / args.seconds:.0f} spans/s while running), in failed exports {len(failed)}, "
              f"dropped by the SDK {dropped}")  # fmt: skip
        print(f"  of those exported: op-shaped {len(ops)}, skipped (HTTP client spans) {len(skipped)}; the route "
              f"said stored {stored_header} ({stored_header / elapsed:.0f} ops/s), "
              f"rejected (partial_success) {rejected}")  # fmt: skip
        for message in [m for r in results for m in r.rejections][:3]:
            print(f"    {message}")
        print(f"  HTTP requests {len(requests_)}: " + ", ".join(f"{s}×{n}" for s, n in sorted(statuses.items(), key=str))
              + f"; exports {len(exports)} ({sum(1 for e in exports if not e[3])} failed), "
              f"{statistics.mean(n for _, _, n, _ in exports) if exports else 0:.0f} spans per export")  # fmt: skip
        took = [t for _, t, _ in requests_]
        print(f"  request latency p50 {_percentile(took, 0.5) * 1000:.0f} ms, p95 {_percentile(took, 0.95) * 1000:.0f} ms, "
              f"max {max(took, default=0) * 1000:.0f} ms; export() (encode, gzip, retries) "
              f"p50 {_percentile([e[1] for e in exports], 0.5) * 1000:.0f} ms, "
              f"p95 {_percentile([e[1] for e in exports], 0.95) * 1000:.0f} ms")  # fmt: skip
        print(f"  SDK log records (warning+): {sum(logs.values())}"
              + "".join(f"\n    {n}× {template}" for template, n in logs.most_common(5)))  # fmt: skip
        for message in [m for r in results for m in r.log_samples][:3]:
            print(f"    e.g. {message}")
        depths = [(t, d) for r in results for t, d in r.depth]
        if depths:
            print(f"  processor queue depth (each runtime, every {args.sample_s:g} s; capacity 2048): "
                  f"p50 {_percentile([d for _, d in depths], 0.5)}, max {max(d for _, d in depths)}; "
                  f"per 10 s: " + ", ".join(
                      f"{statistics.mean(d for t, d in depths if lo <= t - start_at < lo + 10):.0f}"
                      for lo in range(0, int(args.seconds), 10)
                      if any(lo <= t - start_at < lo + 10 for t, _ in depths)))  # fmt: skip
        print(f"  stack CPU while loaded: {cpu_load:.1f} s in {elapsed:.1f} s ({cpu_load / elapsed * 100:.0f}% of one core; "
              f"{cpu_load / max(exported, 1) * 1e6:.0f} µs per exported span, {cpu_load / max(len(ops), 1) * 1e6:.0f} µs "
              f"per op); the runtimes' CPU {client_cpu:.1f} s ({client_cpu / max(ended, 1) * 1e6:.0f} µs per span "
              f"recorded and exported); machine load average (1, 5 min) "
              f"{load_before[0]:.1f}, {load_before[1]:.1f} before, {os.getloadavg()[0]:.1f} at the end, on "
              f"{os.cpu_count()} cores")  # fmt: skip
        during = [s for s in samples if s[0] <= flushed]
        if during:
            third = max(1, len(during) // 3)
            print(f"  SQS queue depth (visible + in flight): max {max(s[1] + s[2] for s in during)}, mean of first third "
                  f"{statistics.mean(s[1] + s[2] for s in during[:third]):.1f}, of last third "
                  f"{statistics.mean(s[1] + s[2] for s in during[-third:]):.1f}")  # fmt: skip
            rss = [s[3] for s in during]
            pairs = zip(rss_each_before[1:], rss_each_after[1:], strict=True)
            containers_rss = ", ".join(f"{before:.0f} → {after:.0f}" for before, after in pairs)
            thirds = (rss[:third], rss[third:-third] or rss[:third], rss[-third:])
            print(f"  stack RSS (parent + containers): {rss_before:.0f} MB before, max {max(rss):.0f} MB, mean per "
                  f"third of the run {' → '.join(f'{statistics.mean(part):.0f}' for part in thirds)} MB, "
                  f"{rss_after:.0f} MB after the drain (parent with moto, drainer and writer: "
                  f"{rss_each_before[0]:.0f} → {rss_each_after[0]:.0f} MB; containers: "
                  f"{containers_rss} MB)")  # fmt: skip
        batches = drainer.batches
        if batches:
            lags = [b[4] for b in batches if b[0] <= flushed] or [b[4] for b in batches]
            busy = sum(b[3] for b in batches)
            written = sum(b[2] for b in batches)
            print(f"  drainer: {len(batches)} writer batches, {written} ops; {written / max(busy, 1e-9):.0f} ops/s while "
                  f"busy ({busy:.1f} s of {drained_at - start_at:.1f} s); queue lag p50 {statistics.median(lags):.2f} s, "
                  f"p95 {_percentile(lags, 0.95):.2f} s; queue empty {drained_at - flushed:.1f} s "
                  "after the last flush")  # fmt: skip

        stored: Counter[str] = Counter()
        tables, rejects = load.read_lake(["op_id"])
        objects = len(tables)
        for table in tables:
            stored.update(table.column("op_id").to_pylist())
        op_set, skipped_set, failed_set = set(ops), set(skipped), set(failed)
        lost = sum(1 for o in op_set if stored[o] == 0)
        duplicated = sum(1 for o in op_set if stored[o] > 1)
        skipped_stored = sum(1 for s in skipped_set if stored[s])
        known = op_set | failed_set
        unexpected = sum(n for o, n in stored.items() if o not in known)
        print(f"  lake: {objects} Parquet objects, {sum(stored.values())} rows "
              f"({sum(stored.values()) / (drained_at - start_at):.0f} ops landed/s, run to empty queue), "
              f"{rejects} reject objects; of {len(op_set)} op-shaped spans exported: lost {lost}, duplicated "
              f"{duplicated} (raw rows, before any dedupe); skipped spans stored {skipped_stored}; "
              f"spans of failed exports stored {sum(1 for f in failed_set if stored[f])} of {len(failed_set)}; "
              f"other rows {unexpected}")  # fmt: skip
        if len(op_set) != len(ops) or len(skipped_set) != len(skipped):
            print(
                f"  WARNING: {len(ops) - len(op_set) + len(skipped) - len(skipped_set)} span ids exported twice"
            )


if __name__ == "__main__":
    main()
