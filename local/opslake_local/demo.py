"""``opslake demo``: the whole idea working locally, in about two minutes, with no network.

Boots the local stack (moto server provisioned from template.yaml, the embedded engine, the HTTP
API), loads the sample dataset, and runs several cycles of the closed loop (opslake_local.loop):
simulated agents call the real tools and make real mistakes, the writer lands their op records,
the analyzer finds the failure signatures and diagnoses them, the consolidator turns evidence into
playbook entries (refusing the ones that say nothing a reader could act on), and in the next cycle
the agents that read playbooks follow the entries that carry a specific fix for one of their
mistakes; an entry that only names the step changes nothing. Each entry is served to about half of
the readers and withheld from the others; the closing note prints the holdout experiment the
consolidator computed for each entry beside the comparison with a second fleet that runs the same
seeded tasks and never reads playbooks, with intervals, and whether the two agree in sign. The
fleet that reads playbooks reports what only its runtimes know (model calls, corrections, rescues,
the entries it followed) as spans through the OpenTelemetry SDK's OTLP exporter to
``POST /v1/traces`` (not opslake-sdk); the other posts the same reports to ``POST /events``.

In the same cycles a second world runs (:mod:`opslake_local.worlds.helpdesk`): service-desk agents
whose tools are their own (customers, tickets, on-site visits), reported only as OpenTelemetry
spans; one analyzer and one consolidator run per cycle learn from both worlds. The closing note
shows each world on its own, and for the second one a scorecard per planted mistake.

Writes ``out/demo/report.html`` (self-contained) and copies the lake under ``out/demo/lake/``.
The diagnoser is the heuristic unless ``OPSLAKE_LLM_BASE_URL`` and ``OPSLAKE_LLM_MODEL`` are set.
"""

from __future__ import annotations

import os
import random
import shutil
import time
import warnings
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from opslake.config import load_settings
from opslake.query.factory import create_engine
from opslake_local.console import progress, text_table
from opslake_local.experiments import HELPDESK, closing_note, scorecard_lines
from opslake_local.http import LocalApi
from opslake_local.loop import (
    HELPDESK_STEPS,
    LOOP_ENV,
    LOOP_STEPS,
    WITH_PREFIX,
    WITHOUT_PREFIX,
    CycleRow,
    LoopResult,
    run_loop,
)
from opslake_local.queries import load_queries, queries_dir, render
from opslake_local.report import build_report, write_report
from opslake_local.stack import QUIET_ENV, ApiKey, LocalStack

ANALYST_QUERIES = ("failure_rate_by_endpoint_hour", "latency_p50_p95_by_endpoint", "top_error_types")
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


# ---- what landed --------------------------------------------------------------------------------
def lake_objects(stack: LocalStack) -> dict[str, bytes]:
    """Every object of the lake: ops (and compacted hours), derived tables, rejects, the snapshot."""
    s3 = stack.client("s3")
    objects: dict[str, bytes] = {}
    for prefix in ("ops/", "ops-compacted/", "derived/", "rejects/", "playbooks/"):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=stack.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                objects[item["Key"]] = s3.get_object(Bucket=stack.bucket, Key=item["Key"])["Body"].read()
    return objects


def export_lake(objects: dict[str, bytes], out_dir: Path) -> None:
    """Copy the lake to ``out_dir`` with the bucket's layout (readable offline)."""
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
def run(
    out_dir: Path = Path("out/demo"),
    *,
    seed: int = 7,
    cycles: int = 4,
    agents: int = 8,
    helpdesk_agents: int = 8,
    helpdesk_tasks: int = 6,
) -> LoopResult:
    """The demo: stack up, closed loop with and without playbooks in both worlds, report, export,
    stack down (``helpdesk_agents=0`` runs the staffing world alone)."""
    started = time.perf_counter()
    # Powertools warns when an invocation added no metric; in Lambda that line goes to the log.
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    parameters, llm = llm_parameters()
    # On a terminal a progress bar under the output names the step that runs; elsewhere, nothing.
    with (
        progress(
            "demo",
            _DEMO_STEPS + cycles * (LOOP_STEPS + (HELPDESK_STEPS if helpdesk_agents else 0)),
            first="starting the local stack",
        ) as step,
        LocalStack(env_overrides={**QUIET_ENV, **LOOP_ENV}, parameters=parameters) as stack,
    ):
        invoker = stack.invoker()
        api = LocalApi(stack, invoker)
        base_url = api.start()
        try:
            _print("local stack")
            print(f"moto {stack.endpoint}   API {base_url}   bucket {stack.bucket}")
            print(
                f"diagnoser: {llm or 'heuristic (set OPSLAKE_LLM_BASE_URL and OPSLAKE_LLM_MODEL for a model)'}"
            )
            with httpx.Client(base_url=base_url, timeout=30) as client:
                key = stack.create_api_key("demo-runtime")
                _print("what the API refuses")
                show_refusals(client, key)
            _print(f"{cycles} cycles: {agents} agents with playbooks, {agents} without, same seed")
            print("runtime reports (model calls, corrections, rescues): agents with playbooks export "
                  "OpenTelemetry spans to POST /v1/traces, agents without post to POST /events")  # fmt: skip
            if helpdesk_agents:
                print(f"second world, the service desk: {helpdesk_agents} agents with playbooks, "
                      f"{helpdesk_agents} without, {helpdesk_tasks} tasks each per cycle; their own tools' "
                      "calls reach opslake only as OpenTelemetry spans (POST /v1/traces)")  # fmt: skip
            print(text_table(cycle_header(bool(helpdesk_agents)), []))
            result = run_loop(
                stack,
                invoker,
                base_url,
                cycles=cycles,
                agents=agents,
                seed=seed,
                on_cycle=print_cycle,
                on_step=step,
                helpdesk_agents=helpdesk_agents,
                helpdesk_tasks=helpdesk_tasks,
            )
            show_experiments(result)
            show_reporting(stack, result)
            step("reading signatures and playbook entries")
            show_signatures_and_entries(stack)
            step("copying the lake")
            objects = lake_objects(stack)
            export_lake(objects, out_dir / "lake")
            step("writing the report")
            report = write_report(
                out_dir / "report.html",
                build_report(
                    create_engine(load_settings(stack.environment), glue_client=stack.client("glue")),
                    summary=result.summary(),
                    title="opslake demo: the closed loop",
                ),
            )
            print(f"report: {report}  (open it in a browser; it needs no network)")
            step("running an analyst query")
            show_analyst_queries(stack, ("top_error_types",))
        finally:
            api.stop()
    print(f"\ndemo finished in {time.perf_counter() - started:.1f} s; nothing left running.")
    return result


_DEMO_STEPS = 5  # run()'s own steps besides the loop's: stack, signatures, lake, report, query


CYCLE_HEADER = (
    "cycle", "messages", "fail% with", "fail% without", "new sigs", "diagnoses", "entries", "refused",
    "followed",
)  # fmt: skip
#: The second world's columns: its fleets' failure rates and the entries its agents followed.
HELPDESK_COLUMNS = ("desk fail% with", "desk fail% without", "desk followed")


def cycle_header(helpdesk: bool) -> tuple[str, ...]:
    """The per-cycle table's columns (new signatures, diagnoses, entries, refusals: both worlds)."""
    return CYCLE_HEADER + (HELPDESK_COLUMNS if helpdesk else ())


def print_cycle(row: CycleRow) -> None:
    s = row.summary()
    cells = [s["cycle"], s["messages_written"], f"{s['failure_rate_with']:.1%}",
             f"{s['failure_rate_without']:.1%}", s["new_signatures"], s["diagnoses"], s["active_entries"],
             s["refused_by_gate"], s["entries_followed"]]  # fmt: skip
    if "helpdesk_failure_rate_with" in s:
        cells += [f"{s['helpdesk_failure_rate_with']:.1%}", f"{s['helpdesk_failure_rate_without']:.1%}",
                  s["helpdesk_entries_followed"]]  # fmt: skip
    line = text_table(cycle_header("helpdesk_failure_rate_with" in s), [tuple(cells)])
    print(line.splitlines()[-1])


def show_experiments(result: LoopResult) -> None:
    """The closing note (:func:`closing_note`) of a finished loop: the staffing world's, then the
    second world's with its scorecard per planted mistake."""
    _print("playbook experiments (holdout, as the consolidator computed them)")
    if result.experiments is None:
        print("no experiments were read")
        return
    if result.helpdesk is not None:
        print("-- world 1: opslake's own tools (staffing)")
    print("\n".join(closing_note(result.experiments)))
    if result.helpdesk is not None:
        print(f"\n-- world 2: {HELPDESK.title}")
        print("\n".join(closing_note(result.helpdesk.experiments, caveats=False)))
        print("\nper cause of the service desk's failed tool calls (planted mistakes, then transient noise):")
        print("\n".join(scorecard_lines(result.helpdesk.scorecard)))


#: Per fleet, the ops in the lake that came through /v1/traces (they carry the span's id) and the
#: runtime's ops that came through /events (not the gateway's, not /log records).
REPORTED_OPS_SQL = f"""SELECT agent_id LIKE '{WITH_PREFIX}-%' AS with_playbooks,
       count(DISTINCT CASE WHEN element_at(attributes, 'otel.span_id') IS NOT NULL THEN op_id END) AS otlp,
       count(DISTINCT CASE WHEN element_at(attributes, 'otel.span_id') IS NULL AND source <> 'gateway'
                            AND coalesce(event_kind, '') <> 'log' THEN op_id END) AS events
FROM ops WHERE agent_id LIKE '{WITH_PREFIX}-%' OR agent_id LIKE '{WITHOUT_PREFIX}-%'
GROUP BY 1"""
#: Per fleet of the second world, its ops in the lake that came through /v1/traces, and how many of
#: them are tool calls (``tool:*``) and failed tool calls.
HELPDESK_OPS_SQL = f"""SELECT reporter_id LIKE '{HELPDESK.with_prefix}-%' AS with_playbooks,
       count(DISTINCT CASE WHEN element_at(attributes, 'otel.span_id') IS NOT NULL THEN op_id END) AS otlp,
       count(DISTINCT CASE WHEN endpoint LIKE 'tool:%' THEN op_id END) AS tool_calls,
       count(DISTINCT CASE WHEN endpoint LIKE 'tool:%' AND NOT success THEN op_id END) AS failed
FROM ops WHERE reporter_id LIKE '{HELPDESK.with_prefix}-%' OR reporter_id LIKE '{HELPDESK.without_prefix}-%'
GROUP BY 1"""


def show_reporting(stack: LocalStack, result: LoopResult) -> None:
    """How each fleet's runtime reports travelled (spans exported, or ops ``/events`` accepted) and
    how many ops of each way in the lake holds (through the query engine)."""
    engine = create_engine(load_settings(stack.environment), glue_client=stack.client("glue"))
    in_lake = {bool(r["with_playbooks"]): r for r in engine.run(REPORTED_OPS_SQL).records()}
    _print("how the runtimes reported (their own ops: model calls, corrections, rescues, checks)")
    rows = []
    for with_playbooks, arm in ((True, "with playbooks"), (False, "without playbooks")):
        stats = [r.with_playbooks if with_playbooks else r.without_playbooks for r in result.rows]
        lake = in_lake.get(with_playbooks, {})
        if stats and stats[0].report == "otlp":
            tasks, failed = sum(s.tasks.total() for s in stats), sum(s.spans_failed for s in stats)
            sent = (
                f"spans exported: {sum(s.spans_exported for s in stats)} ({tasks} invoke_agent, "
                f"{sum(s.spans_reported for s in stats)} reports" + (f"; {failed} failed)" if failed else ")")
            )
            rows.append(
                (arm, "OTLP, POST /v1/traces", sent, f"ops from OTLP in the lake: {lake.get('otlp', 0)}")
            )
        else:
            sent = f"ops accepted: {sum(s.events_posted for s in stats)}"
            rows.append(
                (arm, "POST /events", sent, f"runtime ops from /events in the lake: {lake.get('events', 0)}")
            )
    helpdesk = [r for r in result.rows if r.helpdesk is not None]
    if helpdesk:
        desk = {bool(r["with_playbooks"]): r for r in engine.run(HELPDESK_OPS_SQL).records()}
        for with_playbooks, arm in ((True, "desk with playbooks"), (False, "desk without playbooks")):
            desk_stats = [r.helpdesk_with if with_playbooks else r.helpdesk_without for r in helpdesk]
            fleet = [s for s in desk_stats if s is not None]
            calls, failed = sum(s.tool_calls for s in fleet), sum(s.tool_failures for s in fleet)
            sent = (f"spans exported: {sum(s.spans_exported for s in fleet)} "
                    f"({calls} execute_tool, {failed} of them failed)")  # fmt: skip
            lake = desk.get(with_playbooks, {})
            landed = (f"ops from OTLP in the lake: {lake.get('otlp', 0)} ({lake.get('tool_calls', 0)} tool calls, "
                      f"{lake.get('failed', 0)} failed)")  # fmt: skip
            rows.append((arm, "OTLP, POST /v1/traces", sent, landed))
    print(text_table(["fleet", "runtime reports through", "sent", "landed"], rows))  # fmt: skip


def show_signatures_and_entries(stack: LocalStack) -> None:
    engine = create_engine(load_settings(stack.environment), glue_client=stack.client("glue"))
    _print("failure signatures (table signatures)")
    rows = engine.run(
        "SELECT count, agent_count, substr(template, 1, 90) AS template FROM signatures ORDER BY count DESC LIMIT 8"
    ).rows
    print(text_table(["failures", "agents", "template"], rows))
    _print("playbook entries (table playbooks)")
    rows = engine.run(
        "SELECT kind, status, experiment_stage, coalesce(last_verdict, 'not judged') AS verdict, "
        "evidence_agent_count, substr(action, 1, 80) AS action "
        "FROM playbooks ORDER BY status, confidence DESC, entry_id LIMIT 10"
    ).rows
    print(text_table(["kind", "status", "stage", "verdict", "agents", "action"], rows))


def llm_parameters() -> tuple[dict[str, str], str | None]:
    """Stack parameters for a model when the environment names one (else the heuristic)."""
    base_url, model = os.environ.get("OPSLAKE_LLM_BASE_URL", ""), os.environ.get("OPSLAKE_LLM_MODEL", "")
    if not (base_url and model):
        return {}, None
    return {"LlmBaseUrl": base_url, "LlmModel": model}, f"{model} at {base_url}"


def main() -> None:
    run()


if __name__ == "__main__":
    main()
