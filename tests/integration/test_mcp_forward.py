"""``opslake mcp`` without a stack: where it forwards (arguments, environment, the local state file),
how the stack's answers and the failures on the way to it become MCP errors that say what to do,
that the CLI's other commands never import the MCP SDK, and that stdout carries nothing but protocol
when no stack answers. (Here, not in tests/unit: opslake_local imports moto.)"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from opslake_local.cli import build_parser
from opslake_local.cli.mcp_commands import resolve_target
from opslake_local.cli.target import CliError
from opslake_local.mcp_forward import (
    INTERNAL_ERROR,
    STACK_PROTOCOL_VERSION,
    STACK_UNAVAILABLE,
    Endpoint,
    ForwardError,
    StackForwarder,
    local_endpoint,
    mcp_url,
    read_answer,
)

pytestmark = pytest.mark.integration

OPSLAKE = Path(sys.executable).with_name("opslake")
URL = "https://abc.execute-api.us-east-1.amazonaws.com/prod/mcp"
HINT = "check --url"


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["mcp", *argv])


def _answer(status: int, body: Any, text: str | None = None) -> httpx.Response:
    content = text.encode() if text is not None else json.dumps(body).encode()
    return httpx.Response(status, content=content, request=httpx.Request("POST", URL))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends: nothing listens there


# ---- where it forwards --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "given",
    [
        "https://abc.execute-api.us-east-1.amazonaws.com/prod",
        "https://abc.execute-api.us-east-1.amazonaws.com/prod/",
        "https://abc.execute-api.us-east-1.amazonaws.com/prod/mcp",
        " https://abc.execute-api.us-east-1.amazonaws.com/prod/mcp/ ",
    ],
)
def test_the_mcp_url_of_a_stack_given_by_its_api_url_or_by_mcp_itself(given: str) -> None:
    assert mcp_url(given) == URL


def test_a_url_that_is_not_http_is_a_usage_error() -> None:
    with pytest.raises(CliError, match="not an http") as raised:
        resolve_target(_args("--url", "abc.execute-api.us-east-1.amazonaws.com", "--api-key", "k"), {})
    assert raised.value.code == 2


def test_a_deployed_stack_takes_its_key_from_the_option_or_the_environment() -> None:
    resolve, hint, where = resolve_target(_args("--url", URL[:-4], "--api-key", "from-option"), {})
    assert resolve() == Endpoint(URL, "from-option") and where == URL and "--url" in hint
    resolve, _, _ = resolve_target(_args("--url", URL), {"OPSLAKE_API_KEY": "from-env"})
    assert resolve() == Endpoint(URL, "from-env")
    # the SDK's own variables name the stack too, so an agent's MCP config can keep both out of args
    resolve, _, _ = resolve_target(_args(), {"OPSLAKE_URL": URL[:-4], "OPSLAKE_API_KEY": "from-env"})
    assert resolve() == Endpoint(URL, "from-env")


def test_aws_takes_the_url_from_the_deployed_stacks_api_url_output(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str, str | None]] = []

    def output(args: argparse.Namespace, name: str) -> str:
        asked.append((args.stack_name, name, args.region))
        return URL[:-4]

    monkeypatch.setattr("opslake_local.cli.mcp_commands.stack_output", output)
    args = _args("--aws", "--stack-name", "ops-prod", "--region", "eu-west-1")
    resolve, hint, _ = resolve_target(args, {"OPSLAKE_API_KEY": "k", "OPSLAKE_URL": "http://ignored"})
    assert resolve() == Endpoint(URL, "k") and "--stack-name ops-prod" in hint
    assert asked == [("ops-prod", "ApiUrl", "eu-west-1")]


def test_a_deployed_stack_without_a_key_is_a_usage_error() -> None:
    with pytest.raises(CliError, match="OPSLAKE_API_KEY") as raised:
        resolve_target(_args("--url", URL), {})
    assert raised.value.code == 2


def test_local_reads_the_state_file_for_every_request(tmp_path: Path) -> None:
    state = tmp_path / "local.json"
    environ = {"OPSLAKE_URL": URL, "OPSLAKE_API_KEY": "deployed"}  # --local wins over the environment
    args = build_parser().parse_args(["--state", str(state), "mcp", "--local"])
    resolve, hint, _ = resolve_target(args, environ)
    assert "opslake local up" in hint
    with pytest.raises(ForwardError, match="no local opslake stack is running") as raised:
        resolve()
    assert raised.value.code == STACK_UNAVAILABLE
    state.write_text(json.dumps({"api_url": "http://127.0.0.1:3700", "api_key": "local-key"}))
    assert resolve() == Endpoint("http://127.0.0.1:3700/mcp", "local-key")
    state.write_text(json.dumps({"api_url": "http://127.0.0.1:3701/", "api_key": "restarted"}))
    assert resolve() == Endpoint("http://127.0.0.1:3701/mcp", "restarted")  # a restarted stack is found
    state.write_text(json.dumps({"api_url": "http://127.0.0.1:3701"}))
    with pytest.raises(ForwardError, match="names no API URL or key"):
        resolve()


def test_local_with_a_key_of_its_own(tmp_path: Path) -> None:
    state = tmp_path / "local.json"
    state.write_text(json.dumps({"api_url": "http://127.0.0.1:3700", "api_key": "stack-key"}))
    assert local_endpoint(state, "agent-key") == Endpoint("http://127.0.0.1:3700/mcp", "agent-key")
    state.write_text("{not json")
    with pytest.raises(ForwardError, match="cannot read the local stack's state file"):
        local_endpoint(state)


# ---- the stack's answers ------------------------------------------------------------------------
def test_a_result_passes_through_as_the_stack_gave_it() -> None:
    result = {
        "content": [{"type": "text", "text": "no"}],
        "structuredContent": {"error": "x"},
        "isError": True,
    }
    assert read_answer(_answer(200, {"jsonrpc": "2.0", "id": 1, "result": result}), HINT) == result


@pytest.mark.parametrize("status", [200, 400, 404])
def test_the_stacks_jsonrpc_errors_pass_through_with_code_message_and_data(status: int) -> None:
    error = {"code": -32602, "message": "unknown tool: nope; tools: sql", "data": {"tools": ["sql"]}}
    with pytest.raises(ForwardError) as raised:
        read_answer(_answer(status, {"jsonrpc": "2.0", "id": 1, "error": error}), HINT)
    assert (raised.value.code, raised.value.message, raised.value.data) == (
        -32602,
        error["message"],
        error["data"],
    )


@pytest.mark.parametrize(
    ("status", "body", "code", "says"),
    [
        (403, {"message": "Forbidden"}, STACK_UNAVAILABLE, "refused the API key"),
        (403, {"message": "Missing Authentication Token"}, STACK_UNAVAILABLE, "has no POST /mcp route"),
        (429, {"message": "Too Many Requests"}, STACK_UNAVAILABLE, "throttled"),
        (502, {"message": "Internal server error"}, INTERNAL_ERROR, "HTTP 502 'Internal server error'"),
        (504, "<html>gateway timeout</html>", INTERNAL_ERROR, "HTTP 504"),
        (200, {"jsonrpc": "2.0", "id": 1}, INTERNAL_ERROR, "no JSON-RPC result"),
        (200, "<html>a page for every path</html>", INTERNAL_ERROR, "no JSON-RPC result"),
    ],
)
def test_answers_that_are_not_the_stacks_mcp_say_what_went_wrong(
    status: int, body: Any, code: int, says: str
) -> None:
    response = _answer(status, None, body) if isinstance(body, str) else _answer(status, body)
    with pytest.raises(ForwardError) as raised:
        read_answer(response, HINT)
    assert raised.value.code == code
    assert says in raised.value.message and URL in raised.value.message


@pytest.mark.parametrize(
    ("status", "body", "says"),
    [
        (504, {"message": "Endpoint request timed out"}, "longer than API Gateway's 29 s"),
        (504, "<html>gateway timeout</html>", "longer than API Gateway's 29 s"),
        (413, {"message": "Request Too Long"}, "send less"),
        (502, {"message": "Internal server error"}, "the function's logs"),
    ],
)
def test_a_gateway_failure_says_what_it_means_not_to_check_the_url(status: int, body: Any, says: str) -> None:
    """A timeout, a request too large or a failed function is not a wrong --url: the hint to check
    the URL sent the agent's user after the wrong thing."""
    response = _answer(status, None, body) if isinstance(body, str) else _answer(status, body)
    with pytest.raises(ForwardError) as raised:
        read_answer(response, HINT)
    assert says in raised.value.message and f"HTTP {status}" in raised.value.message
    assert HINT not in raised.value.message
    assert raised.value.code == INTERNAL_ERROR and raised.value.data == {"status": status}


# ---- the forwarder ------------------------------------------------------------------------------
def test_requests_carry_the_key_one_session_id_and_fresh_ids() -> None:
    seen: list[httpx.Request] = []

    def stack(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = json.loads(request.content)
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": body["id"], "result": {"echo": body}})

    async def run() -> list[dict[str, Any]]:
        forwarder = StackForwarder(
            lambda: Endpoint(URL, "the-key"), HINT, transport=httpx.MockTransport(stack)
        )
        try:
            return [
                await forwarder.request("tools/list"),
                await forwarder.request("tools/call", {"name": "sql", "arguments": {"sql": "SELECT 1"}}),
            ]
        finally:
            await forwarder.aclose()

    listed, called = anyio.run(run)
    assert listed["echo"] == {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    assert called["echo"]["id"] == 2 and called["echo"]["params"]["arguments"] == {"sql": "SELECT 1"}
    assert {r.headers["x-api-key"] for r in seen} == {"the-key"}
    sessions = {r.headers["x-opslake-session-id"] for r in seen}
    assert len(sessions) == 1 and sessions.pop().startswith("mcp-")
    assert {r.headers["mcp-protocol-version"] for r in seen} == {STACK_PROTOCOL_VERSION}
    assert all(r.headers["content-type"] == "application/json" for r in seen)


@pytest.mark.parametrize(
    ("failure", "says"),
    [
        (httpx.ConnectError("connection refused"), "no opslake stack answers at"),
        (httpx.ReadTimeout("timed out"), "did not answer tools/call within 2 s"),
        (httpx.RemoteProtocolError("server disconnected"), "failed: server disconnected"),
    ],
)
def test_transport_failures_become_errors_that_say_what_to_do(failure: Exception, says: str) -> None:
    def stack(request: httpx.Request) -> httpx.Response:
        raise failure

    async def run() -> None:
        forwarder = StackForwarder(
            lambda: Endpoint(URL, "k"), HINT, timeout_s=2, transport=httpx.MockTransport(stack)
        )
        try:
            await forwarder.request("tools/call", {"name": "sql", "arguments": {}})
        finally:
            await forwarder.aclose()

    with pytest.raises(ForwardError) as raised:
        anyio.run(run)
    assert (
        raised.value.code == STACK_UNAVAILABLE
        and says in raised.value.message
        and URL in raised.value.message
    )


# ---- the process --------------------------------------------------------------------------------
def test_the_clis_other_commands_do_not_import_the_mcp_sdk_or_httpx() -> None:
    probe = (
        "import sys\n"
        "from opslake_local.cli import build_parser\n"
        "build_parser().parse_args(['mcp', '--url', 'http://x', '--api-key', 'k'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'httpx', 'anyio')))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_stdout_carries_only_protocol_when_no_stack_answers() -> None:
    """Raw JSON-RPC lines in, as an agent writes them: every stdout line is a JSON-RPC message, the
    failure is a JSON-RPC error that names the URL, and the log line goes to stderr."""
    url = f"http://127.0.0.1:{_closed_port()}"
    messages: list[dict[str, Any]] = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
    ]  # fmt: skip
    process = subprocess.Popen(
        [str(OPSLAKE), "mcp", "--url", url, "--api-key", "k"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    lines = []
    watchdog = threading.Timer(60, process.kill)  # a silent server fails the test instead of hanging it
    watchdog.start()
    try:
        for message in messages:  # stdin stays open until each answer is in: EOF ends the session
            process.stdin.write(json.dumps(message) + "\n")
            process.stdin.flush()
            if "id" in message:
                lines.append(process.stdout.readline())
        process.stdin.close()
        rest, stderr = process.stdout.read(), process.stderr.read() if process.stderr else ""
        assert process.wait(timeout=60) == 0, stderr[-2000:]
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
    assert rest == ""
    answers = [json.loads(line) for line in lines]
    assert [a.get("id") for a in answers] == [1, 2]
    assert answers[0]["result"]["serverInfo"]["name"] == "opslake"
    assert answers[1]["error"]["code"] == STACK_UNAVAILABLE
    assert answers[1]["error"]["message"].startswith(f"no opslake stack answers at {url}/mcp")
    assert "Traceback" not in stderr and "no opslake stack answers" in stderr


def test_a_deployed_stack_without_a_key_exits_2_before_serving() -> None:
    result = subprocess.run(
        [str(OPSLAKE), "mcp", "--url", "http://127.0.0.1:9"],
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2 and result.stdout == ""
    assert "OPSLAKE_API_KEY" in result.stderr


def _spawn_mcp(sigint: str, **streams: Any) -> subprocess.Popen[str]:
    """``opslake mcp`` started with SIGINT ``ignored`` (as a non-interactive shell starts a background
    job: ``make test &``, a CI step, an agent host run that way; the ignoring is inherited) or at
    its ``default``: explicit either way, from the first instant, so no test depends on how pytest
    itself was started. The child inherits this process's disposition at the fork (a handler
    becomes the default at exec), so it is set here around the spawn only."""
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN if sigint == "ignored" else signal.default_int_handler)
    try:
        return subprocess.Popen(
            [str(OPSLAKE), "mcp", "--url", f"http://127.0.0.1:{_closed_port()}", "--api-key", "k"],
            stdin=subprocess.PIPE,
            text=True,
            **streams,
        )
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_ctrl_c_ends_the_server_while_stdin_stays_open(inherited: str) -> None:
    """SIGINT (Ctrl-C in a terminal, or an agent host stopping its servers) with stdin still open:
    the SDK's stdin reader blocks in a worker thread that cancellation waits for, so the server
    hung until stdin closed. It ends at once, quietly, without a traceback; also when it was
    started with SIGINT ignored (then asyncio installed no handler and SIGINT did nothing: the
    test failed whenever pytest itself ran as a background job)."""
    process = _spawn_mcp(inherited, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    try:
        params = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        }
        process.stdin.write(
            json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}) + "\n"
        )
        process.stdin.flush()
        assert json.loads(process.stdout.readline())["id"] == 1  # serving, stdin open
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("opslake mcp did not end on SIGINT while stdin was open")
        stderr = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
        process.stdin.close()
    assert code == 0, stderr[-2000:]
    assert "Traceback" not in stderr
    assert process.stdout.read() == ""


def test_ctrl_c_while_the_server_is_starting_ends_it_too() -> None:
    """SIGINT may come at any moment, not only once the server answers: sent while it is still
    starting (the request unanswered), the process ends all the same, no answer cut short. (Not
    with SIGINT inherited as ignored: one that comes before the process can undo that is lost.)"""
    process = _spawn_mcp("default", stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}) + "\n")
        process.stdin.flush()
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("opslake mcp did not end on a SIGINT sent while it was starting")
    finally:
        if process.poll() is None:
            process.kill()
        process.stdin.close()
    out = process.stdout.read()
    assert out == "" or json.loads(out.splitlines()[0])["id"] == 1  # nothing, or a whole answer
