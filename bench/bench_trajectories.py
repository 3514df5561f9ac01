"""Public agent trajectories through the whole loop, scored against each set's causes table (issue 24).

For each set: boot the local stack (moto server from template.yaml, embedded engine, the HTTP API),
create four API keys and split the set's sessions among them like four runtimes, replay every tool
call with the real OpenTelemetry SDK exporter (OTLP/HTTP protobuf, gzip) as an ``execute_tool`` span
inside its session's ``invoke_agent`` span (GenAI attributes: tool name, arguments, result, call id;
a failed call has status ERROR with its message), drain the writer, run the AnalyzerFunction and
the ConsolidatorFunction (``--rounds`` times), then read the lake's ``failures``, ``signatures`` and
``playbooks`` tables and score them against ``bench/trajectories/<set>/causes.json``:

* ops landed per tool call (each call must land as exactly one op);
* signatures per real cause and each signature's purity (its ops' majority-cause share);
* entries active and proposed, the causes whose fix or rule an entry names, and generic entries
  (see :mod:`trajectories.causes` for both judgements);
* the consolidator's report: candidates, contrast candidates, refusals by reason.

    .venv/bin/python bench/bench_trajectories.py --set mcpmark-notion --raw RAW_DIR
    .venv/bin/python bench/bench_trajectories.py --set swe-agent --jsonl FILE.jsonl --json out.json

``--raw`` converts the set's raw folder (see bench/trajectories/README.md for where to get it);
``--jsonl`` reads a converted file. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "common"), str(ROOT / "local"), str(ROOT / "bench")]

from opentelemetry.exporter.otlp.proto.http import Compression  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai  # noqa: E402
from opentelemetry.semconv._incubating.attributes.session_attributes import SESSION_ID  # noqa: E402
from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME  # noqa: E402
from opentelemetry.trace import SpanKind, Status, StatusCode  # noqa: E402
from opentelemetry.util.types import AttributeValue  # noqa: E402
from trajectories.causes import (  # noqa: E402
    UNCLASSIFIED,
    CausesTable,
    EntryScore,
    SignatureScore,
    ToolVocabulary,
    load_causes,
    score_entries,
    score_signatures,
    weighted_purity,
)
from trajectories.convert import SETS, ToolCall, convert, read_jsonl  # noqa: E402

from opslake.config import load_settings  # noqa: E402
from opslake.query.factory import create_engine  # noqa: E402
from opslake_local.drain import Drainer  # noqa: E402
from opslake_local.http import LocalApi  # noqa: E402
from opslake_local.loop import ANALYZER, CONSOLIDATOR, LOOP_ENV, scheduled_event  # noqa: E402
from opslake_local.stack import QUIET_ENV, LocalStack  # noqa: E402

Operation = gen_ai.GenAiOperationNameValues
REPORTERS = 4
SCOPE = "bench.trajectories"
CALL_SPACING_NS = 200_000_000  # 0.2 s between the calls of a session
CALL_DURATION_NS = 50_000_000
SESSION_SPACING_NS = 5_000_000_000


@dataclass
class Replay:
    """What was sent: op id → the call it carries (the causes table keys scoring on it)."""

    ops: dict[str, ToolCall] = field(default_factory=dict)
    exported: int = 0
    seconds: float = 0.0


def op_id_of(span: Any) -> str:
    context = span.get_span_context()
    return f"{context.trace_id:032x}:{context.span_id:016x}"


def replay(calls: Sequence[ToolCall], base_url: str, keys: Sequence[str], set_name: str) -> Replay:
    """Every call as an ``execute_tool`` span of its session's ``invoke_agent`` span, exported by
    the real OTLP/HTTP exporter with the API key of the runtime its session belongs to."""
    sessions: dict[str, list[ToolCall]] = defaultdict(list)
    for call in calls:
        sessions[call.session].append(call)
    providers = []
    for index, key in enumerate(keys):
        exporter = OTLPSpanExporter(
            endpoint=base_url.rstrip("/") + "/v1/traces",
            headers={"x-api-key": key},
            compression=Compression.Gzip,
            timeout=120,
        )
        provider = TracerProvider(resource=Resource.create({SERVICE_NAME: f"{set_name}-runtime-{index + 1}"}))
        provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=256))
        providers.append(provider)
    result = Replay()
    started = time.perf_counter()
    base = time.time_ns() - SESSION_SPACING_NS * (len(sessions) + 1)
    for number, (session, session_calls) in enumerate(sorted(sessions.items())):
        tracer = providers[number % len(providers)].get_tracer(SCOPE)
        start = base + number * SESSION_SPACING_NS
        model = next((call.model for call in session_calls if call.model), None)
        attributes: dict[str, AttributeValue] = {
            gen_ai.GEN_AI_OPERATION_NAME: Operation.INVOKE_AGENT.value,
            gen_ai.GEN_AI_AGENT_NAME: set_name,
            SESSION_ID: session,
            gen_ai.GEN_AI_CONVERSATION_ID: session,
        }
        if model:
            attributes[gen_ai.GEN_AI_REQUEST_MODEL] = model
        agent = tracer.start_span(
            f"invoke_agent {set_name}", kind=SpanKind.INTERNAL, attributes=attributes, start_time=start
        )
        context = _context_of(agent)
        end = start
        for call in session_calls:
            call_start = start + (call.call + 1) * CALL_SPACING_NS
            end = call_start + CALL_DURATION_NS
            tool_attributes: dict[str, AttributeValue] = {
                gen_ai.GEN_AI_OPERATION_NAME: Operation.EXECUTE_TOOL.value,
                gen_ai.GEN_AI_TOOL_NAME: call.tool,
                gen_ai.GEN_AI_TOOL_CALL_ID: call.key,
                gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS: call.arguments,
                SESSION_ID: session,
            }
            if call.result:
                tool_attributes[gen_ai.GEN_AI_TOOL_CALL_RESULT] = call.result
            span = tracer.start_span(
                f"execute_tool {call.tool}",
                context,
                SpanKind.INTERNAL,
                tool_attributes,
                start_time=call_start,
            )
            if call.errored:
                span.set_status(Status(StatusCode.ERROR, call.error or "failed"))
            span.end(end_time=end)
            result.ops[op_id_of(span)] = call
        agent.end(end_time=end + CALL_DURATION_NS)
    for provider in providers:
        provider.force_flush(300_000)
        provider.shutdown()
    result.exported = len(result.ops)
    result.seconds = time.perf_counter() - started
    return result


def _context_of(span: Any) -> Any:
    from opentelemetry import trace

    return trace.set_span_in_context(span)


@dataclass
class SetResult:
    set: str
    tool_calls: int
    failed_calls: int
    sessions: int
    tools: int
    failed_by_cause: dict[str, int]
    ops_landed: int
    ops_landed_once: int
    failures_with_signature: int
    signatures: list[dict[str, Any]]
    signatures_per_cause: dict[str, int]
    weighted_purity: float
    min_purity: float
    entries_active: int
    entries_proposed: int
    entries: list[dict[str, Any]]
    causes_named: dict[str, list[str]]
    generic_entries: int
    consolidator: list[dict[str, Any]]
    analyzer: list[dict[str, Any]]
    seconds: dict[str, float]


def _sql_list(values: Iterable[str]) -> str:
    return ", ".join("'" + value.replace("'", "''") + "'" for value in values)


def run_set(
    set_name: str,
    calls: Sequence[ToolCall],
    table: CausesTable,
    *,
    rounds: int = 2,
    on_step: Callable[[str], None] = lambda _what: None,
) -> SetResult:
    """Boot a fresh local stack, replay ``calls``, run the jobs ``rounds`` times, score."""
    seconds: dict[str, float] = {}
    env = {**QUIET_ENV, **LOOP_ENV, "OPSLAKE_QUERY_ENGINE": "embedded"}
    with LocalStack(env_overrides=env) as stack:
        invoker = stack.invoker()
        api = LocalApi(stack, invoker)
        base_url = api.start()
        try:
            keys = [stack.create_api_key(f"{set_name}-runtime-{i + 1}").value for i in range(REPORTERS)]
            on_step(f"{set_name}: replaying {len(calls)} tool calls through the OTLP exporter")
            sent = replay(calls, base_url, keys, set_name)
            seconds["replay"] = round(sent.seconds, 1)
            drainer = Drainer(stack, invoker)
            started = time.perf_counter()
            drainer.drain()
            seconds["drain"] = round(time.perf_counter() - started, 1)
            analyzer_runs, consolidator_runs = [], []
            started = time.perf_counter()
            for round_number in range(1, rounds + 1):
                on_step(f"{set_name}: analyzer and consolidator, round {round_number}/{rounds}")
                analyzer_runs.append(dict(invoker.invoke(ANALYZER, scheduled_event(stack, ANALYZER))))
                drainer.drain()
                consolidator_runs.append(
                    dict(invoker.invoke(CONSOLIDATOR, scheduled_event(stack, CONSOLIDATOR)))
                )
                drainer.drain()
            seconds["jobs"] = round(time.perf_counter() - started, 1)
            settings = load_settings({**stack.environment, "OPSLAKE_QUERY_ENGINE": "embedded"})
            engine = create_engine(settings, glue_client=stack.client("glue"))
            return _score(set_name, calls, table, sent, engine, analyzer_runs, consolidator_runs, seconds)
        finally:
            api.stop()


def _score(
    set_name: str,
    calls: Sequence[ToolCall],
    table: CausesTable,
    sent: Replay,
    engine: Any,
    analyzer_runs: list[dict[str, Any]],
    consolidator_runs: list[dict[str, Any]],
    seconds: dict[str, float],
) -> SetResult:
    op_ids = list(sent.ops)
    landed: Counter[str] = Counter()
    op_signatures: dict[str, str] = {}
    for chunk in range(0, len(op_ids), 2_000):
        listed = _sql_list(op_ids[chunk : chunk + 2_000])
        for row in engine.run(f"SELECT op_id FROM ops WHERE op_id IN ({listed})").records():
            landed[row["op_id"]] += 1
        for row in engine.run(
            f"SELECT op_id, signature_id FROM failures WHERE op_id IN ({listed})"
        ).records():
            op_signatures[row["op_id"]] = row["signature_id"]
    signature_rows = engine.run("SELECT * FROM signatures").records()
    endpoints = {row["signature_id"]: str(row.get("endpoint")) for row in signature_rows}
    templates = {row["signature_id"]: str(row.get("template")) for row in signature_rows}
    assignments = {op_id: table.assign(call) for op_id, call in sent.ops.items()}
    signatures = score_signatures(assignments, op_signatures, endpoints)
    per_cause: Counter[str] = Counter()
    for score in signatures:
        for cause in score.causes:
            per_cause[cause] += 1
    entries = engine.run("SELECT * FROM playbooks").records()
    current = _current_entries(entries)
    vocabulary = ToolVocabulary.of(calls)
    scored = score_entries(current, table, vocabulary)
    named: dict[str, list[str]] = defaultdict(list)
    for entry in scored:
        if entry.status == "active":
            for cause in entry.names:
                named[cause].append(entry.entry_id)
    failed_by_cause = Counter(cause for cause in assignments.values() if cause is not None)
    return SetResult(
        set=set_name,
        tool_calls=len(calls),
        failed_calls=sum(call.errored for call in calls),
        sessions=len({call.session for call in calls}),
        tools=len({call.tool for call in calls}),
        failed_by_cause=dict(sorted(failed_by_cause.items())),
        ops_landed=sum(landed.values()),
        ops_landed_once=sum(1 for op_id in op_ids if landed[op_id] == 1),
        failures_with_signature=len(op_signatures),
        signatures=[_signature_row(score, templates) for score in signatures],
        signatures_per_cause=dict(sorted(per_cause.items())),
        weighted_purity=round(weighted_purity(signatures), 4),
        min_purity=round(min((score.purity for score in signatures), default=1.0), 4),
        entries_active=sum(1 for entry in scored if entry.status == "active"),
        entries_proposed=sum(1 for entry in scored if entry.status == "proposed"),
        entries=[_entry_row(entry) for entry in scored],
        causes_named=dict(sorted(named.items())),
        generic_entries=sum(
            1 for entry in scored if entry.generic and entry.status in ("active", "proposed")
        ),
        consolidator=[_report(run) for run in consolidator_runs],
        analyzer=[_analyzer_report(run) for run in analyzer_runs],
        seconds=seconds,
    )


def _current_entries(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The latest row of each entry (the table may hold an entry's earlier states)."""
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = str(row.get("entry_id"))
        stamp = row.get("updated_at") or row.get("created_at")
        kept = latest.get(key)
        kept_stamp = (kept.get("updated_at") or kept.get("created_at")) if kept else None
        if kept is None or (stamp is not None and (kept_stamp is None or stamp >= kept_stamp)):
            latest[key] = row
    return list(latest.values())


def _signature_row(score: SignatureScore, templates: dict[str, str]) -> dict[str, Any]:
    return {
        "signature_id": score.signature_id,
        "endpoint": score.endpoint,
        "ops": score.ops,
        "majority": score.majority,
        "purity": round(score.purity, 4),
        "causes": dict(score.causes.most_common()),
        "template": templates.get(score.signature_id, "")[:160],
    }


def _entry_row(entry: EntryScore) -> dict[str, Any]:
    return {**asdict(entry), "text": entry.text[:300]}


def _report(run: dict[str, Any]) -> dict[str, Any]:
    nothing_specific = run.get("nothing_specific") or []
    rejected = run.get("rejected") or []
    return {
        "candidates": run.get("candidates", 0),
        "contrast_candidates": run.get("contrast_candidates", 0),
        "entries_created": len(run.get("entries_created") or []),
        "entries_published": len(run.get("entries_published") or []),
        "active_entries": run.get("active_entries", 0),
        "proposed_entries": run.get("proposed_entries", 0),
        "nothing_specific": len(nothing_specific),
        "rejected": len(rejected),
        "refused_by_gate": dict(run.get("refused_by_gate") or {}),
        "entries_refused": len(run.get("entries_refused") or []),
        "errors": run.get("errors") or {},
    }


def _analyzer_report(run: dict[str, Any]) -> dict[str, Any]:
    keys = ("failures_read", "signatures_new", "signatures_updated", "diagnoses", "errors")
    return {key: run[key] for key in keys if key in run}


def table_text(result: SetResult, table: CausesTable) -> str:
    causes = table.by_id()
    lines = [
        f"## {result.set}: {result.tool_calls} tool calls, {result.failed_calls} failed, "
        f"{result.sessions} sessions, {result.tools} tools",
        f"ops landed {result.ops_landed} (exactly once: {result.ops_landed_once}/{result.tool_calls}); "
        f"failed ops with a signature {result.failures_with_signature}/{result.failed_calls}",
        f"signatures {len(result.signatures)}, purity weighted {result.weighted_purity:.3f}, "
        f"min {result.min_purity:.3f}",
        f"entries active {result.entries_active}, proposed {result.entries_proposed}, "
        f"generic {result.generic_entries}; causes named by an active entry "
        f"{len(result.causes_named)}/{sum(1 for c in table.causes if c.actionable)} actionable",
        "",
        "| cause | tool | failed calls | signatures | named by |",
        "|---|---|---:|---:|---|",
    ]
    for cause_id, count in result.failed_by_cause.items():
        cause = causes.get(cause_id)
        tool = "|".join(cause.tools) if cause else "(long tail)"
        if cause is not None and not cause.actionable:
            tool += " (not actionable)"
        named = ", ".join(result.causes_named.get(cause_id, [])) or "-"
        lines.append(
            f"| {cause_id} | {tool} | {count} | {result.signatures_per_cause.get(cause_id, 0)} | {named} |"
        )
    lines += ["", "consolidator runs:"]
    lines += [f"  {json.dumps(run, sort_keys=True)}" for run in result.consolidator]
    impure = [row for row in result.signatures if row["purity"] < 1.0]
    if impure:
        lines += ["", "impure signatures:"]
        lines += [f"  {row['ops']} ops {row['causes']} {row['template'][:100]!r}" for row in impure[:10]]
    lines += ["", f"seconds: {result.seconds}"]
    return "\n".join(lines)


def load_calls(set_name: str, raw: Path | None, jsonl: Path | None) -> list[ToolCall]:
    if jsonl is not None:
        return [call for call in read_jsonl(jsonl) if call.set == set_name]
    if raw is None:
        raise SystemExit("give --raw (the set's raw folder) or --jsonl (a converted file)")
    return convert(set_name, raw)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--set", required=True, choices=sorted(SETS))
    parser.add_argument("--raw", type=Path, help="the set's raw folder (converted on the fly)")
    parser.add_argument("--jsonl", type=Path, help="a converted JSONL file (bench/trajectories/convert.py)")
    parser.add_argument("--rounds", type=int, default=2, help="analyzer + consolidator runs after the replay")
    parser.add_argument("--json", type=Path, help="also write the result as JSON here")
    args = parser.parse_args(argv)
    calls = load_calls(args.set, args.raw, args.jsonl)
    table = load_causes(args.set)
    result = run_set(args.set, calls, table, rounds=args.rounds, on_step=lambda what: print(what, flush=True))
    print(table_text(result, table))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(asdict(result), indent=1, default=str) + "\n", encoding="utf-8")
    unclassified = result.failed_by_cause.get(UNCLASSIFIED, 0)
    print(f"\n{unclassified} failed calls matched no cause of the table (the long tail).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
