"""A fleet of MCP agents on the local stack: the official SDK's client calls POST /mcp at volume.

Starts the local stack as bench_otlp_load.py does (moto server from template.yaml, the API's
functions in ``--containers`` processes behind the local HTTP API, the background SQS → writer
drainer, the scheduler), puts a playbook snapshot in the lake, warms every tool in every container,
then ``--clients`` client processes, each an agent with the official MCP Python SDK's client over
Streamable HTTP (``mcp.Client`` on ``streamable_http_client``, connected once in ``--mode``, headers
``x-api-key`` and its own ``x-opslake-session-id``), calling a seeded mix of tools one after the
other for ``--seconds``: ``tables``; ``worker`` with a real id, a malformed one and one that does not
exist; ``sql`` with a small query on workers and a refused ``DROP``/``DELETE``; ``search``;
``match`` (and one without a place, refused); ``playbooks``; a few ``log`` (and one with a result
the route refuses); and now and then a tool that does not exist (a JSON-RPC error, recorded at
``/mcp``). Each ``tools/call`` carries its own ``x-opslake-trace-id`` (set by an httpx request hook
on the SDK's HTTP client, which sees the JSON-RPC body), so each call can be found in the lake.
Then the drainer empties the queue (at most ``--drain-timeout`` s) and every Parquet object under
``ops/`` is read back.

Reports calls/s, calls by tool and outcome (a result, an ``isError`` result, a JSON-RPC error, a
transport error or timeout), latency p50/p95 per tool, the HTTP statuses the SDK's client got, the
stack's CPU per call, the machine's load, and exactly once: for every call, the raw Parquet rows
(before any dedupe) with its trace id and ``source`` "mcp" (lost = none, duplicated = more than one,
mismatched = not the endpoint, success, ``error_type`` and session the client saw), and for each
``log`` call the logged op (``source`` "agent_log", the client's ``op_id``: exactly one for an
accepted entry, none for a refused one); the counts per session, endpoint and outcome against the
client's; and no other rows of the fleet's sessions.

Loopback only, bounded in time; prints figures and asserts nothing (CI never runs it).

    .venv/bin/python bench/bench_mcp_load.py [--seconds 60] [--clients 4] [--containers 2] [--mode auto]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "common"), str(ROOT / "local"), str(ROOT / "bench")]

from bench_load import _percentile, load_arguments, load_stack  # noqa: E402

from opslake.datasets.staffing import CITIES, DEFAULT_WORKERS, ROLES  # noqa: E402
from opslake.tools.mcp.registry import BY_NAME  # noqa: E402

MCP_PATH = "/mcp"
TRACE_HEADER = "x-opslake-trace-id"
SESSION_HEADER = "x-opslake-session-id"
WARM_SESSION = "mcp-load-warmup"
#: The endpoint of a tools/call that reaches no tool (an unknown name): its record is at /mcp.
UNKNOWN_TOOL_ENDPOINT = "/mcp"

#: The mix: (kind, weight). A kind is a tool and an intent (the call should succeed or be refused).
MIX: tuple[tuple[str, int], ...] = (
    ("tables", 8),
    ("worker", 14),
    ("worker:malformed", 3),
    ("worker:missing", 2),
    ("sql", 14),
    ("sql:refused", 4),
    ("search", 14),
    ("match", 10),
    ("match:no-place", 2),
    ("playbooks", 12),
    ("log", 3),
    ("log:refused", 1),
    ("unknown-tool", 1),
)


def _entry(entry_id: str, trigger: str, action: str, endpoint: str, kind: str = "do") -> dict[str, Any]:
    return {
        "entry_id": entry_id, "trigger": trigger, "action": action, "kind": kind, "confidence": 0.8,
        "domain": "staffing", "scope": "project", "status": "active", "endpoint": endpoint,
        "evidence_op_ids": [f"op-{entry_id}-{i}" for i in range(4)], "created_at": "2026-11-20T10:00:00Z",
    }  # fmt: skip


#: The playbook the fleet reads (``playbooks`` and ``search`` over entries).
SNAPSHOT = {
    "generated_at": "2026-11-22T10:00:00Z",
    "entries": [
        _entry("pb-state", "before querying workers by place", "filter workers on state first", "/sql"),
        _entry(
            "pb-describe", "before writing sql on a table", "describe the table with the table tool", "/sql"
        ),
        _entry("pb-match", "staffing a welding job", "give match a city and the certifications", "/match"),
        _entry("pb-worker", "looking up a worker", "worker ids are W and five digits", "/worker/{id}"),
        _entry("pb-guess", "an unknown column", "never guess column names", "/sql", kind="avoid"),
    ],
}


def arguments_for(kind: str, rng: random.Random, session: str, n: int) -> tuple[str, dict[str, Any]]:
    """(tool name, arguments) of one call of ``kind``: varied as an agent's would be, seeded."""
    role = rng.choice(ROLES)
    city, state = rng.choice(CITIES)
    if kind == "tables":
        return "tables", {}
    if kind == "worker":
        return "worker", {"id": f"W{rng.randint(1, DEFAULT_WORKERS):05d}"}
    if kind == "worker:malformed":
        return "worker", {"id": rng.choice(["W1", "w00042", "W000421", "42", "W0004x"])}
    if kind == "worker:missing":
        return "worker", {"id": f"W{rng.randint(DEFAULT_WORKERS + 1, 99999):05d}"}
    if kind == "sql":
        sql = rng.choice(
            [
                f"SELECT role, count(*) AS n FROM workers WHERE state = '{state}' GROUP BY role ORDER BY n DESC",
                f"SELECT worker_id, name, rating FROM workers WHERE city = '{city}' AND role = '{role.name}' "
                "ORDER BY rating DESC LIMIT 5",
                f"SELECT availability, count(*) AS n FROM workers WHERE role = '{role.name}' GROUP BY availability",
                f"SELECT round(avg(hourly_rate), 2) AS rate FROM workers WHERE state = '{state}'",
            ]
        )
        return "sql", {"sql": sql, "limit": 20}
    if kind == "sql:refused":
        return "sql", {"sql": rng.choice(["DROP TABLE workers", "DELETE FROM workers WHERE rating < 3"])}
    if kind == "search":
        return "search", {"q": f"{rng.choice(role.skills)} {role.name} {city}".lower(), "limit": 5}
    if kind == "match":
        place = {"city": city} if rng.random() < 0.5 else {"state": state}
        need = ", ".join(rng.sample(role.skills, 2))
        return "match", {"role": role.name, **place, "need": need, "count": 5}
    if kind == "match:no-place":
        return "match", {"role": role.name, "need": rng.choice(role.skills)}
    if kind == "playbooks":
        return "playbooks", rng.choice([{"endpoint": "/sql", "limit": 5}, {"q": "workers"}, {}])
    if kind == "log":
        return "log", {
            "operation": f"staff a {role.name} in {city}",
            "approach": f"match with state {state} first, then worker lookups",
            "result": rng.choice(["success", "failure", "lesson"]),
            "endpoint": "/match",
            "op_id": f"{session}-log-{n:06d}",
        }
    if kind == "log:refused":
        return "log", {"operation": "query workers", "approach": "guessed", "result": "maybe"}
    if kind == "unknown-tool":
        return "hire_worker", {"id": "W00042"}
    raise ValueError(kind)


@dataclass
class Call:
    """One tools/call as the client saw it."""

    kind: str
    tool: str
    trace: str | None  # the x-opslake-trace-id the request carried (None: never sent)
    outcome: str  # "ok", "isError", "jsonrpc", "transport"
    error_type: str | None  # isError: structuredContent.error; jsonrpc: the code
    took_s: float
    ended: float
    log_op_id: str | None = None  # a log call's op_id


@dataclass
class ClientResult:
    session: str
    calls: list[Call] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)  # every HTTP answer the SDK's client got
    connects: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cpu_s: float = 0.0


def client_run(
    index: int,
    url: str,
    api_key: str,
    start_at: float,
    stop_at: float,
    seed: int,
    mode: str,
    timeout_s: float,
    mix: dict[str, int],
) -> ClientResult:
    """One agent: connects the SDK's client, then calls tools one after the other until ``stop_at``;
    a transport error or a timeout ends the connection and the agent connects again."""
    import anyio

    result = ClientResult(session=f"mcp-load-{seed}-c{index}")
    anyio.run(_agent, index, url, api_key, start_at, stop_at, seed, mode, timeout_s, mix, result)
    return result


async def _agent(
    index: int,
    url: str,
    api_key: str,
    start_at: float,
    stop_at: float,
    seed: int,
    mode: str,
    timeout_s: float,
    mix: dict[str, int],
    result: ClientResult,
) -> None:
    import anyio
    from mcp import Client, MCPError
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    rng = random.Random(seed * 1000 + index)
    kinds, weights = list(mix), list(mix.values())
    sent: dict[str, str | None] = {"trace": None}
    serial = iter(range(1, 1 << 40))

    async def tag(request: Any) -> None:
        """Each tools/call gets its own trace id (the SDK's client sets headers per connection)."""
        if request.method != "POST":
            return
        try:
            message = json.loads(request.content)
        except (ValueError, RuntimeError):
            return
        if isinstance(message, dict) and message.get("method") == "tools/call":
            trace = f"{result.session}-t{next(serial):06d}"
            request.headers[TRACE_HEADER] = trace
            sent["trace"] = trace

    async def status(response: Any) -> None:
        result.statuses[response.status_code] += 1

    while time.time() < start_at:
        await anyio.sleep(0.01)
    started_cpu = time.process_time()  # from the start: the SDK's import (≈1 s) is not a call's cost
    n = 0
    while time.time() < stop_at:
        http = create_mcp_http_client(headers={"x-api-key": api_key, SESSION_HEADER: result.session})
        http.event_hooks["request"].append(tag)
        http.event_hooks["response"].append(status)
        connect_started = time.perf_counter()
        try:
            async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                result.connects.append(time.perf_counter() - connect_started)
                while time.time() < stop_at:
                    n += 1
                    kind = rng.choices(kinds, weights)[0]
                    tool, arguments = arguments_for(kind, rng, result.session, n)
                    sent["trace"] = None
                    error_type: str | None
                    started = time.perf_counter()
                    try:
                        with anyio.fail_after(timeout_s):
                            answer = await client.call_tool(tool, arguments)
                    except MCPError as exc:
                        outcome, error_type = "jsonrpc", str(exc.error.code)
                    except Exception as exc:  # a transport error or a timeout: connect again
                        result.calls.append(
                            Call(kind, tool, sent["trace"], "transport", type(exc).__name__,
                                 time.perf_counter() - started, time.time())
                        )  # fmt: skip
                        result.errors.append(f"{kind}: {type(exc).__name__}: {exc}"[:300])
                        break
                    else:
                        outcome = "isError" if answer.is_error else "ok"
                        structured = answer.structured_content or {}
                        error_type = structured.get("error") if answer.is_error else None
                    result.calls.append(
                        Call(kind, tool, sent["trace"], outcome, error_type, time.perf_counter() - started,
                             time.time(), arguments.get("op_id") if tool == "log" else None)
                    )  # fmt: skip
        except Exception as exc:  # the connection itself failed (or closing it did)
            result.errors.append(f"connect: {type(exc).__name__}: {exc}"[:300])
            await anyio.sleep(0.5)
    result.cpu_s = time.process_time() - started_cpu


def warm_tools(base_url: str, key: str, containers: int) -> None:
    """Every tool once per container before the clock starts (a tool's handler is imported on its
    first call in a container): ``containers`` concurrent raw posts per tool, so each container is
    busy with one. Their records carry the warm-up session, which the checks leave out."""
    import httpx

    headers = {
        "x-api-key": key,
        SESSION_HEADER: WARM_SESSION,
        "mcp-protocol-version": "2025-11-25",
        "accept": "application/json, text/event-stream",
    }
    rng = random.Random(0)
    calls = [arguments_for(kind, rng, WARM_SESSION, 0) for kind in ("tables", "worker", "sql", "search", "match",
                                                                      "playbooks", "log:refused")]  # fmt: skip

    def post(item: tuple[int, tuple[str, dict[str, Any]]]) -> None:
        number, (tool, arguments) = item
        message = {"jsonrpc": "2.0", "id": number, "method": "tools/call",
                   "params": {"name": tool, "arguments": arguments}}  # fmt: skip
        answer = httpx.post(f"{base_url}{MCP_PATH}", json=message, headers=headers, timeout=120)
        assert answer.status_code == 200, answer.text

    with ThreadPoolExecutor(max(1, containers)) as threads:
        for call in calls:
            list(threads.map(post, [(i, call) for i in range(max(1, containers))]))


def expected_endpoint(call: Call) -> str:
    return UNKNOWN_TOOL_ENDPOINT if call.tool not in BY_NAME else BY_NAME[call.tool].route


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    load_arguments(parser)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--mode", choices=["auto", "legacy"], default="auto", help="the SDK client's connect mode"
    )
    parser.add_argument("--call-timeout", type=float, default=60.0, help="a call taking longer is a hang")
    parser.add_argument(
        "--weights",
        default="",
        help="change the mix, e.g. 'unknown-tool=20,log:refused=10' (kinds: "
        + ", ".join(k for k, _ in MIX)
        + ")",
    )
    args = parser.parse_args()
    mix = dict(MIX)
    for item in filter(None, args.weights.split(",")):
        kind, _, weight = item.partition("=")
        if kind not in mix:
            parser.error(f"unknown kind {kind!r}")
        mix[kind] = int(weight)

    with load_stack(args, ROOT, MCP_PATH) as load:
        stack, drainer, key = load.stack, load.drainer, load.key
        stack.client("s3").put_object(
            Bucket=stack.bucket, Key="playbooks/current.json", Body=json.dumps(SNAPSHOT).encode()
        )
        warm_started = time.perf_counter()
        warm_tools(load.base_url, key, args.containers)
        where = "in every container" if args.containers else "in this process"
        print(f"warm-up: every tool {where}, {time.perf_counter() - warm_started:.1f} s")
        load_before = os.getloadavg()
        rss_before = load.rss_mb()
        start_at = time.time() + 3.0  # the client processes import the SDK (≈1 s) meanwhile
        stop_at = start_at + args.seconds
        load.queue.start()
        url = f"{load.base_url}{MCP_PATH}"
        results, ended, cpu_load = load.run_clients(
            client_run,
            [
                (i, url, key, start_at, stop_at, args.seed, args.mode, args.call_timeout, mix)
                for i in range(args.clients)
            ],
            start_at,
        )
        elapsed = ended - start_at
        load_end = os.getloadavg()
        drained_at = load.drain(args.drain_timeout)
        rss_after = load.rss_mb()
        load.stop()
        samples = load.queue.samples

        calls = [c for r in results for c in r.calls]
        statuses: Counter[int] = Counter()
        for r in results:
            statuses.update(r.statuses)
        outcomes = Counter(c.outcome for c in calls)
        client_cpu = sum(r.cpu_s for r in results)
        connects = [t for r in results for t in r.connects]
        print(f"\nload: {args.clients} MCP agents (official SDK client, Streamable HTTP, mode {args.mode}), "
              f"{args.seconds:g} s ({elapsed:.1f} s until the last call ended)")  # fmt: skip
        print(f"  tools/call {len(calls)} ({len(calls) / elapsed:.1f} calls/s): result {outcomes['ok']}, "
              f"isError {outcomes['isError']}, JSON-RPC error {outcomes['jsonrpc']}, "
              f"transport error or timeout {outcomes['transport']}; connections {len(connects)} "
              f"(connect p50 {_percentile(connects, 0.5) * 1000:.0f} ms)")  # fmt: skip
        print("  HTTP answers the SDK's client got (incl. connect): "
              + ", ".join(f"{s}×{n}" for s, n in sorted(statuses.items())))  # fmt: skip
        for error in [e for r in results for e in r.errors][:5]:
            print(f"    {error}")
        print(
            f"  {'kind':18} {'calls':>6} {'ok':>6} {'isError':>8} {'rpc err':>8} {'transp':>7}  error types"
        )
        for kind in mix:
            mine = [c for c in calls if c.kind == kind]
            counted = Counter(c.outcome for c in mine)
            types = Counter(c.error_type for c in mine if c.error_type)
            print(f"  {kind:18} {len(mine):6} {counted['ok']:6} {counted['isError']:8} {counted['jsonrpc']:8} "
                  f"{counted['transport']:7}  {', '.join(f'{t}×{n}' for t, n in types.most_common(3))}")  # fmt: skip
        print(f"  latency by tool (ms)  {'calls':>6} {'p50':>7} {'p95':>7} {'max':>7}")
        for tool in sorted({c.tool for c in calls}):
            took = [c.took_s * 1000 for c in calls if c.tool == tool and c.outcome != "transport"]
            if took:
                print(f"    {tool:19} {len(took):6} {_percentile(took, 0.5):7.1f} "
                      f"{_percentile(took, 0.95):7.1f} {max(took):7.1f}")  # fmt: skip
        took_all = [c.took_s * 1000 for c in calls if c.outcome != "transport"]
        print(f"    {'(every call)':19} {len(took_all):6} {_percentile(took_all, 0.5):7.1f} "
              f"{_percentile(took_all, 0.95):7.1f} {max(took_all, default=0):7.1f}")  # fmt: skip
        print(f"  stack CPU while loaded: {cpu_load:.1f} s in {elapsed:.1f} s ({cpu_load / elapsed * 100:.0f}% of "
              f"one core; {cpu_load / max(len(calls), 1) * 1000:.1f} ms per call); the agents' CPU "
              f"{client_cpu:.1f} s ({client_cpu / max(len(calls), 1) * 1000:.1f} ms per call); machine load "
              f"average (1, 5 min) {load_before[0]:.1f}, {load_before[1]:.1f} before, {load_end[0]:.1f}, "
              f"{load_end[1]:.1f} at the end, on {os.cpu_count()} cores; stack RSS {rss_before:.0f} → "
              f"{rss_after:.0f} MB")  # fmt: skip
        during = [s for s in samples if s[0] <= ended]
        if during:
            print(f"  SQS queue depth (visible + in flight): max {max(s[1] + s[2] for s in during)}, "
                  f"mean {statistics.mean(s[1] + s[2] for s in during):.1f}")  # fmt: skip
        batches = drainer.batches
        if batches:
            lags = [b[4] for b in batches]
            print(f"  drainer: {len(batches)} writer batches, {sum(b[2] for b in batches)} ops; queue lag "
                  f"p50 {statistics.median(lags):.2f} s, p95 {_percentile(lags, 0.95):.2f} s; queue empty "
                  f"{drained_at - ended:.1f} s after the last call")  # fmt: skip

        # the lake: raw Parquet rows, before any dedupe
        columns = ["op_id", "source", "session_id", "trace_id", "endpoint", "success", "error_type"]
        tables, rejects = load.read_lake(columns)
        objects = len(tables)
        rows: list[dict[str, Any]] = [row for table in tables for row in table.to_pylist()]
        sessions = {r.session for r in results}
        fleet = [row for row in rows if row["session_id"] in sessions]
        by_trace: dict[tuple[str, str | None], list[dict[str, Any]]] = defaultdict(list)
        for row in fleet:
            by_trace[(row["source"], row["trace_id"])].append(row)
        session_of = {c.trace: r.session for r in results for c in r.calls}
        checked = lost = duplicated = mismatched = 0
        log_lost = log_duplicated = log_unexpected = log_checked = 0
        mismatches: list[str] = []
        transport_recorded = Counter[int]()
        for call in calls:
            records = by_trace.get(("mcp", call.trace), []) if call.trace else []
            if call.outcome == "transport" or (call.outcome == "jsonrpc" and call.tool in BY_NAME):
                transport_recorded[len(records)] += 1  # the server may or may not have run it
                continue
            checked += 1
            if not records:
                lost += 1
            elif len(records) > 1:
                duplicated += 1
            want = (
                expected_endpoint(call),
                call.outcome == "ok",
                "mcp_unknown_tool" if call.outcome == "jsonrpc" else call.error_type,
                session_of[call.trace],
            )
            for row in records:
                got = (row["endpoint"], row["success"], row["error_type"], row["session_id"])
                if got != want:
                    mismatched += 1
                    mismatches.append(f"{call.kind} {call.trace}: lake {got}, client {want}")
            if call.tool == "log":
                logged = by_trace.get(("agent_log", call.trace), [])
                log_checked += 1
                if call.outcome == "ok":
                    kept = [row for row in logged if row["op_id"] == call.log_op_id]
                    log_lost += not kept
                    log_duplicated += len(kept) > 1
                    log_unexpected += len(logged) - len(kept)
                else:
                    log_unexpected += len(logged)
        traced = {c.trace for c in calls if c.trace}
        other = [row for row in fleet if row["trace_id"] not in traced]
        client_counts = Counter(
            (session_of[c.trace], expected_endpoint(c), c.outcome == "ok")
            for c in calls
            if c.trace
            and (c.outcome in ("ok", "isError") or (c.outcome == "jsonrpc" and c.tool not in BY_NAME))
        )
        lake_counts = Counter(
            (row["session_id"], row["endpoint"], row["success"])
            for row in fleet
            if row["source"] == "mcp" and row["trace_id"] in traced
        )
        diff = (client_counts - lake_counts) + (lake_counts - client_counts)
        print(f"  lake: {objects} Parquet objects, {len(rows)} rows ({len(fleet)} of the fleet's sessions), "
              f"{rejects} reject objects")  # fmt: skip
        print(f"  exactly once (raw rows, by each call's trace id): of {checked} tools/calls answered, lost {lost}, "
              f"duplicated {duplicated}, endpoint/success/error_type/session mismatched {mismatched}; "
              f"log calls {log_checked}: logged op lost {log_lost}, duplicated {log_duplicated}, "
              f"unexpected {log_unexpected}; rows of the fleet's sessions no call explains {len(other)}")  # fmt: skip
        print(f"  counts per (session, endpoint, success): client {sum(client_counts.values())}, lake "
              f"{sum(lake_counts.values())}, differing {sum(diff.values())}")  # fmt: skip
        if transport_recorded:
            print("  calls without an answer (transport error, timeout, unexpected JSON-RPC error) by records "
                  "found: " + ", ".join(f"{n} record(s)×{k}" for n, k in sorted(transport_recorded.items())))  # fmt: skip
        for line in mismatches[:5]:
            print(f"    {line}")
        for key_, n in list(diff.items())[:5]:
            print(f"    differs: {key_} ×{n}")
        for row in other[:5]:
            print(f"    other row: {row}")


if __name__ == "__main__":
    main()
