"""Public agent trajectories → one small intermediate format: JSONL, one record per tool call.

Each reader walks a set's raw files (a folder outside the repo: see bench/trajectories/README.md for
how to get it) and yields :class:`ToolCall` records in trajectory order. A record keeps what a
runtime's instrumentation would know of the call (tool, arguments, result, whether it failed and
with what message) and where it sat (set, session, turn, call index, model). Whether a call failed
is the trajectory's own signal where it has one (MCP ``isError``, a tool message flagged ``error``)
and otherwise the set's documented convention (an API error body, ``Error…`` text, a non-zero
return code); each reader's docstring says which.

    python bench/trajectories/convert.py SET RAW_DIR OUT.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: Text kept of a call's arguments and result (the op contract cuts summaries to 2,000 characters).
MAX_TEXT = 4_000
MAX_ERROR = 2_000


@dataclass(frozen=True)
class ToolCall:
    """One tool call of one trajectory, as the replay sends it and the causes table scores it."""

    set: str
    session: str  # the trajectory (one conversation / task run)
    turn: int  # the assistant turn that made the call (0-based)
    call: int  # the call's index in the session (0-based, trajectory order)
    tool: str
    arguments: str  # the arguments as the model sent them (JSON text where the set has JSON)
    result: str  # the tool's result text (cut to MAX_TEXT)
    errored: bool
    error: str | None  # the failure's message (cut to MAX_ERROR), None when the call succeeded
    model: str | None = None

    @property
    def key(self) -> str:
        """The call's id within its set: ``session#call``."""
        return f"{self.session}#{self.call}"


def write_jsonl(calls: Iterable[ToolCall], path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for call in calls:
            out.write(json.dumps(asdict(call), ensure_ascii=False) + "\n")
            count += 1
    return count


def read_jsonl(path: Path) -> list[ToolCall]:
    with path.open(encoding="utf-8") as lines:
        return [ToolCall(**json.loads(line)) for line in lines if line.strip()]


# ---- MCP results as trajectories store them: JSON text inside JSON text, content lists, flags -----


@dataclass(frozen=True)
class Unwrapped:
    """An MCP tool result with its wrappings removed: the innermost value, its text, and whether
    any wrapping flagged it as an error (``isError: true`` or a content item's ``error: true``)."""

    value: Any
    text: str
    flagged: bool


def unwrap(value: Any, depth: int = 0) -> Unwrapped:
    if depth > 8:
        return Unwrapped(value, value if isinstance(value, str) else json.dumps(value), False)
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("{", "["):
            try:
                return unwrap(json.loads(stripped), depth + 1)
            except ValueError:
                pass
        return Unwrapped(value, value, False)
    if isinstance(value, list):
        parts = [unwrap(item, depth + 1) for item in value]
        if len(parts) == 1:
            return parts[0]
        text = "\n".join(part.text for part in parts)
        return Unwrapped(value, text, any(part.flagged for part in parts))
    if isinstance(value, dict):
        flagged = value.get("isError") is True or value.get("error") is True
        if isinstance(value.get("content"), list) and value["content"]:
            inner = unwrap(value["content"], depth + 1)
            return Unwrapped(inner.value, inner.text, flagged or inner.flagged)
        if value.get("type") == "text" and isinstance(value.get("text"), str):
            inner = unwrap(value["text"], depth + 1)
            return Unwrapped(inner.value, inner.text, flagged or inner.flagged)
        if value.get("type") == "resource" and isinstance(value.get("resource"), dict):
            return Unwrapped(value, str(value["resource"].get("text", "")), flagged)
        return Unwrapped(value, json.dumps(value, ensure_ascii=False), flagged)
    return Unwrapped(value, json.dumps(value), False)


ERROR_PREFIX = re.compile(r"^\s*(Error\b|MCP error|Error executing|Error running tool|Security violation)")


def api_error_message(value: Any) -> str | None:
    """The message of an API error body (Notion's ``{"object": "error", "message": …}``, a
    ``{"error": {"message": …}}`` body, or a ZodError body), else None."""
    if not isinstance(value, dict):
        return None
    if value.get("object") == "error" and isinstance(value.get("message"), str):
        return str(value["message"])
    error = value.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str):
            return f"{error.get('name', 'Error')}: {message}" if error.get("name") else message
    if isinstance(error, str) and error:
        return error
    return None


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


# ---- MCPMark community experiments (eval-sys/mcpmark-community-experiments) ---------------------


def read_mcpmark(root: Path, set_name: str, service: str, server: str) -> Iterator[ToolCall]:
    """``mcp_servers/<service>/<server>/run-<n>/<task>/messages.json`` (OpenAI Responses items:
    ``function_call`` then ``function_call_output`` by ``call_id``); one session per run and task.

    A call failed when its output is flagged (``isError: true``), is an API error body (Notion's
    ``"object": "error"``, ``{"error": …}``), or its text starts with ``Error``/``MCP error``."""
    base = root / "mcp_servers" / service / server
    model = _mcpmark_model(base)
    for messages_path in sorted(base.glob("run-*/*/messages.json")):
        run, task = messages_path.parent.parent.name, messages_path.parent.name
        session = f"{run}/{task}"
        try:
            messages = json.loads(messages_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        pending: dict[str, tuple[dict[str, Any], int]] = {}
        turn, index, after_call = 0, 0, False
        for item in messages:
            kind = item.get("type")
            if kind == "function_call":
                if not after_call:
                    turn += 1
                after_call = True
                pending[item["call_id"]] = (item, turn - 1)
            elif kind == "function_call_output":
                called = pending.pop(item.get("call_id"), None)
                if called is None:
                    continue
                call, call_turn = called
                result = unwrap(item.get("output"))
                message = api_error_message(result.value)
                errored = result.flagged or message is not None or bool(ERROR_PREFIX.match(result.text))
                yield ToolCall(
                    set=set_name,
                    session=session,
                    turn=call_turn,
                    call=index,
                    tool=call["name"],
                    arguments=_cut(_arguments_text(call.get("arguments", "")), MAX_TEXT),
                    result=_cut(result.text, MAX_TEXT),
                    errored=errored,
                    error=_cut(message or result.text, MAX_ERROR) if errored else None,
                    model=model,
                )
                index += 1
            elif kind == "message" or item.get("role") == "assistant":
                after_call = False


def _mcpmark_model(base: Path) -> str | None:
    for meta_path in sorted(base.glob("run-*/*/meta.json"))[:1]:
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        model = meta.get("actual_model_name") or meta.get("model") or meta.get("model_name")
        return str(model) if model else None
    return None


# ---- Toolathlon trajectories (WaitHZ/toolathlon-traj-website, trajs/<model>_<task>.json) --------

RETURN_CODE = re.compile(r"Return code:\s*(-?\d+)")


def read_toolathlon(root: Path, set_name: str = "toolathlon") -> Iterator[ToolCall]:
    """``trajs/<model>_<task>.json`` (Chat Completions messages: an assistant's ``tool_calls``, then
    ``tool`` messages by ``tool_call_id``); one session per file, the model from the file name.

    A call failed when its result is flagged (a content item's ``error: true``, ``isError``), its
    text starts with ``Error``/``Security violation``, or (code execution) it reports a non-zero
    ``Return code`` or an execution timeout."""
    for path in sorted((root / "trajs").glob("*.json")):
        model, _, task = path.stem.partition("_")
        try:
            trajectory = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        pending: dict[str, tuple[dict[str, Any], int]] = {}
        turn, index = 0, 0
        for message in trajectory.get("messages", []):
            role = message.get("role")
            if role == "assistant":
                for tool_call in message.get("tool_calls") or []:
                    pending[tool_call["id"]] = (tool_call, turn)
                turn += 1
            elif role == "tool":
                called = pending.pop(message.get("tool_call_id"), None)
                if called is None:
                    continue
                tool_call, call_turn = called
                function = tool_call.get("function", {})
                result = unwrap(message.get("content", ""))
                code = RETURN_CODE.search(result.text)
                errored = (
                    result.flagged
                    or bool(ERROR_PREFIX.match(result.text))
                    or (code is not None and code.group(1) != "0")
                    or "=== EXECUTION TIMEOUT ===" in result.text
                )
                yield ToolCall(
                    set=set_name,
                    session=f"{model}/{task}",
                    turn=call_turn,
                    call=index,
                    tool=str(function.get("name", "?")),
                    arguments=_cut(_arguments_text(function.get("arguments", "")), MAX_TEXT),
                    result=_cut(result.text, MAX_TEXT),
                    errored=errored,
                    error=_cut(_error_lines(result.text), MAX_ERROR) if errored else None,
                    model=model,
                )
                index += 1


def _error_lines(text: str) -> str:
    """A failure's message: the traceback's last line (the exception, which states the cause) when
    the result is a program's output, else the text."""
    if "Traceback (most recent call last)" in text:
        lines = [line for line in text.split("=== EXECUTION INFO ===")[0].splitlines() if line.strip()]
        return lines[-1].strip() if lines else text
    return text


# ---- SWE-agent trajectories (SWE-agent/SWE-agent, *.traj) ---------------------------------------

#: SWE-agent's own commands (its tools); any other action is a shell command (tool ``bash``).
SWE_AGENT_COMMANDS = frozenset(
    (
        "open", "goto", "scroll_up", "scroll_down", "create", "edit", "search_dir", "search_file",
        "find_file", "submit", "str_replace_editor", "disassemble", "decompile", "debug_start",
        "debug_add_breakpoint", "connect_start", "connect_sendline", "exit_forfeit",
    )
)  # fmt: skip
SWE_AGENT_FAILED = re.compile(
    r"Your proposed edit has introduced new syntax error|Traceback \(most recent call last\)|"
    r"No such file or directory|: command not found|^Usage: |^Error: |cannot open `",
    re.MULTILINE,
)


def read_swe_agent(root: Path, set_name: str = "swe-agent") -> Iterator[ToolCall]:
    """Every ``*.traj`` under ``root`` (SWE-agent's ``trajectory`` steps: ``action`` and
    ``observation``); one session per file. An action whose first word is one of SWE-agent's
    commands is a call of that tool, with its argument line as ``{"args": …}`` (and an edit's text
    as ``{"text": …}``); any other action is ``bash`` with ``{"command": …}``.

    A call failed when its observation shows a refused edit (new syntax errors), a Python
    traceback, a missing file, an unknown command or a usage message."""
    for path in sorted(root.rglob("*.traj")):
        try:
            trajectory = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        model = _swe_agent_model(trajectory)
        session = str(path.relative_to(root).with_suffix(""))
        for index, step in enumerate(trajectory.get("trajectory", [])):
            action = str(step.get("action", "")).strip()
            if not action:
                continue
            tool, arguments = _swe_agent_call(action)
            observation = str(step.get("observation") or "")
            failed = SWE_AGENT_FAILED.search(observation)
            yield ToolCall(
                set=set_name,
                session=session,
                turn=index,
                call=index,
                tool=tool,
                arguments=_cut(json.dumps(arguments, ensure_ascii=False), MAX_TEXT),
                result=_cut(observation, MAX_TEXT),
                errored=failed is not None,
                error=_cut(_swe_agent_error(observation), MAX_ERROR) if failed else None,
                model=model,
            )


def _swe_agent_call(action: str) -> tuple[str, dict[str, str]]:
    first_line, _, rest = action.partition("\n")
    word, _, args = first_line.partition(" ")
    if word in SWE_AGENT_COMMANDS:
        arguments = {"args": args.strip()}
        if rest.strip():
            arguments["text"] = rest.replace("end_of_edit", "").rstrip()
        return word, arguments
    return "bash", {"command": action}


def _swe_agent_error(observation: str) -> str:
    if "Your proposed edit has introduced new syntax error" in observation:
        errors = re.findall(r"^- (E\d+|F\d+) (.+)$", observation, re.MULTILINE)
        detail = "; ".join(f"{code} {text}" for code, text in errors)
        return f"Your proposed edit has introduced new syntax error(s): {detail}".strip()
    return _error_lines(observation).strip()


def _swe_agent_model(trajectory: dict[str, Any]) -> str | None:
    replay = trajectory.get("replay_config")
    if isinstance(replay, str):
        try:
            replay = json.loads(replay)
        except ValueError:
            replay = None
    if isinstance(replay, dict):
        name = (replay.get("agent") or {}).get("model", {}).get("name")
        if name:
            return str(name)
    return None


# ---- the sets ----------------------------------------------------------------------------------

Reader = Callable[[Path], Iterator[ToolCall]]
SETS: dict[str, Reader] = {
    "mcpmark-notion": lambda root: read_mcpmark(root, "mcpmark-notion", "notion", "official"),
    "toolathlon": read_toolathlon,
    "swe-agent": read_swe_agent,
}


def convert(set_name: str, raw: Path) -> list[ToolCall]:
    if set_name not in SETS:
        raise SystemExit(f"unknown set {set_name!r}: one of {', '.join(SETS)}")
    return list(SETS[set_name](raw))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("set", choices=sorted(SETS))
    parser.add_argument("raw", type=Path, help="the set's raw folder (a checkout of its source repository)")
    parser.add_argument("out", type=Path, help="the JSONL file to write")
    args = parser.parse_args(argv)
    calls = convert(args.set, args.raw)
    written = write_jsonl(calls, args.out)
    failed = sum(call.errored for call in calls)
    sessions = len({call.session for call in calls})
    print(f"{args.set}: {written} tool calls, {failed} failed, {sessions} sessions -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
