"""MCP tool-call overhead against the same REST call, in one run on the local stack.

The same tool calls (``/sql`` with a tiny query, ``GET /tables``, ``/match``) go ``--calls`` times,
interleaved (the order of the paths rotates every round), through:
  rest        the REST route (httpx, x-api-key);
  mcp-raw     ``POST /mcp`` ``tools/call`` as a raw JSON-RPC post (httpx): the stack's own cost of
              MCP, i.e. the JSON-RPC envelope and the in-process dispatch to the tool's resolver;
  mcp-sdk     the official MCP SDK's Streamable HTTP client (``mcp.Client``, connected once): what
              an agent using the SDK over HTTP pays, the client's own validation included;
  stdio       the SDK's stdio client through ``opslake mcp`` (connected once), which forwards to
              ``POST /mcp``: what an agent configured with a command pays per call.
Every path is one async loop in this process, with the stack's API in a thread of the same process
(functions in process, embedded engine), so the figures compare paths, not machines. Overhead is
the median of the per-round differences against ``rest`` (and p50 − p50 beside it). The first call
of each path is a warm-up, not counted. Then the connect times: ``opslake mcp`` over stdio (process
start, the SDK's import, the handshake; ``--connects`` fresh processes) and the SDK's HTTP client
(``initialize``, or ``server/discover`` then ``initialize`` in mode auto).

Prints figures; asserts nothing.

    .venv/bin/python bench/bench_mcp.py [--calls 50] [--connects 5]

Last run (2026-11-23, 2 cores, load ~1.5, ``--calls 40 --connects 5``; ms, overhead = median of the
paired per-round differences against rest):

    call      rest p50   mcp-raw            mcp-sdk            stdio
    sql         69.3     63.2 (-2.9)        65.2 (-0.4)        66.5 (+2.3)
    tables      22.2     22.2 (+0.3)        24.6 (+1.1)        25.1 (+3.6)
    match      107.7    104.1 (+0.1)       116.5 (-0.1)       109.8 (+3.1)
    connect: stdio `opslake mcp` p50 1705 (max 2311); SDK HTTP client legacy 61.9, auto 59.3

i.e. the stack's MCP envelope and in-process dispatch cost below the tools' own run-to-run noise
(≈0.3 ms on the cheapest call, ``tables``); the SDK client adds ≈1 ms, the stdio hop ≈3 ms; an
``opslake mcp`` process takes ≈1.7 s to connect (Python, the CLI's imports, the SDK's ≈1 s import).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "common"), str(ROOT / "local")]
OPSLAKE = str(Path(sys.executable).with_name("opslake"))
PROTOCOL = "2025-11-25"

#: name -> (REST method, REST path, REST body, MCP tool, MCP arguments)
CASES: dict[str, tuple[str, str, dict[str, Any] | None, str, dict[str, Any]]] = {
    "sql (tiny query)": ("POST", "/sql", {"sql": "SELECT 1 AS n"}, "sql", {"sql": "SELECT 1 AS n"}),
    "tables": ("GET", "/tables", None, "tables", {}),
    "match": (
        "POST",
        "/match",
        {"role": "welder", "state": "MI", "need": "tig welding", "count": 10},
        "match",
        {"role": "welder", "state": "MI", "need": "tig welding", "count": 10},
    ),
}
PATHS = ["rest", "mcp-raw", "mcp-sdk", "stdio"]


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def timed(call: Callable[[], Awaitable[None]]) -> float:
    t0 = time.perf_counter()
    await call()
    return (time.perf_counter() - t0) * 1000


async def bench(base_url: str, key: str, calls: int, connects: int) -> None:
    import httpx
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    headers = {"x-api-key": key}
    mcp_headers = {
        **headers,
        "mcp-protocol-version": PROTOCOL,
        "accept": "application/json, text/event-stream",
    }
    stdio_args = ["mcp", "--url", base_url, "--api-key", key]
    ids = iter(range(1, 1 << 62))

    async with (
        httpx.AsyncClient(base_url=base_url, timeout=120) as http,
        Client(
            streamable_http_client(f"{base_url}/mcp", http_client=create_mcp_http_client(headers=headers)),
            mode="legacy",
        ) as sdk,
        Client(StdioServerParameters(command=OPSLAKE, args=stdio_args), mode="legacy") as stdio,
    ):

        def path_call(path: str, case: str) -> Callable[[], Awaitable[None]]:
            method, route, body, tool, arguments = CASES[case]

            async def rest() -> None:
                answer = await http.request(method, route, json=body, headers=headers)
                assert answer.status_code == 200, answer.text

            async def raw() -> None:
                message = {
                    "jsonrpc": "2.0",
                    "id": next(ids),
                    "method": "tools/call",
                    "params": {"name": tool, "arguments": arguments},
                }
                answer = await http.post("/mcp", json=message, headers=mcp_headers)
                assert answer.status_code == 200 and not answer.json()["result"]["isError"], answer.text

            async def through(client: Any) -> None:
                result = await client.call_tool(tool, arguments)
                assert not result.is_error, result

            async def sdk_call() -> None:
                await through(sdk)

            async def stdio_call() -> None:
                await through(stdio)

            return {"rest": rest, "mcp-raw": raw, "mcp-sdk": sdk_call, "stdio": stdio_call}[path]

        first = {(p, c): await timed(path_call(p, c)) for c in CASES for p in PATHS}
        samples: dict[tuple[str, str], list[float]] = {key_: [] for key_ in first}
        for round_ in range(calls):
            order = PATHS[round_ % len(PATHS) :] + PATHS[: round_ % len(PATHS)]
            for case in CASES:
                for path in order:
                    samples[(path, case)].append(await timed(path_call(path, case)))

    print(
        f"tool calls on the local stack (functions in process, embedded engine), {calls} rounds, "
        "paths interleaved; ms"
    )
    print(
        f"    {'call':18} {'path':8} {'p50':>7} {'p95':>7} {'mean':>7}  {'overhead vs rest':>22}  first call"
    )
    for case in CASES:
        rest = samples[("rest", case)]
        for path in PATHS:
            values = samples[(path, case)]
            if path == "rest":
                overhead = ""
            else:
                paired = statistics.median(v - r for v, r in zip(values, rest, strict=True))
                overhead = f"{paired:+7.1f} ({pct(values, 0.5) - pct(rest, 0.5):+6.1f} p50)"
            print(
                f"    {case:18} {path:8} {pct(values, 0.5):7.1f} {pct(values, 0.95):7.1f} "
                f"{statistics.fmean(values):7.1f}  {overhead:>22}  {first[(path, case)]:.0f}"
            )

    stdio_connect: list[float] = []
    for _ in range(connects):
        t0 = time.perf_counter()
        async with Client(StdioServerParameters(command=OPSLAKE, args=stdio_args), mode="legacy") as fresh:
            stdio_connect.append((time.perf_counter() - t0) * 1000)
            await fresh.list_tools()
    http_connect: dict[str, list[float]] = {"legacy": [], "auto": []}
    for _ in range(connects):
        for mode in http_connect:
            t0 = time.perf_counter()
            transport = streamable_http_client(
                f"{base_url}/mcp", http_client=create_mcp_http_client(headers=headers)
            )
            async with Client(transport, mode=mode) as fresh:
                http_connect[mode].append((time.perf_counter() - t0) * 1000)
                await fresh.list_tools()  # lets the client's `initialized` notification finish first
    print(f"connect (fresh client each, {connects} times; ms)")
    print(
        f"    stdio `opslake mcp` (process + SDK import + handshake)  p50 {pct(stdio_connect, 0.5):7.0f}  "
        f"max {max(stdio_connect):7.0f}"
    )
    for mode, values in http_connect.items():
        print(
            f"    SDK HTTP client, mode {mode:6}                        p50 {pct(values, 0.5):7.1f}  "
            f"max {max(values):7.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="rounds of every call on every path")
    parser.add_argument("--connects", type=int, default=5, help="fresh connections timed per client")
    args = parser.parse_args()

    import anyio

    from opslake_local.http import LocalApi
    from opslake_local.stack import QUIET_ENV, LocalStack

    with LocalStack(env_overrides={**QUIET_ENV, "OPSLAKE_QUERY_ENGINE": "embedded"}) as stack:
        assert stack.api_key is not None
        api = LocalApi(stack, stack.invoker())
        base_url = api.start()
        try:
            anyio.run(bench, base_url, stack.api_key.value, args.calls, args.connects)
        finally:
            api.stop()


if __name__ == "__main__":
    main()
