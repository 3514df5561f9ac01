"""A fake OpenAI-compatible chat-completions server on 127.0.0.1 (random port, in a thread).

Each ``POST …/chat/completions`` takes the next scripted :class:`Reply` (or ``default`` when the
script is empty; as server-sent events when the request asks to ``stream``) and every request is
recorded, body parsed, so tests can assert on prompts, headers and how many requests arrived.
``GET …/models`` answers the model list (401 without a bearer token when ``require_key`` is set).
Helpers build the replies tests need: answers, prose, tool calls, schema-breaking JSON, errors with
``Retry-After``, a spent quota, and slow replies (read timeouts).

    with FakeLlm() as llm:
        llm.script(FakeLlm.error(429, headers={"Retry-After": "2"}), FakeLlm.answer({...}))
        client = LlmClient(LlmConfig(base_url=llm.base_url, model="m"))
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: bytes | str | dict[str, Any] = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # wait before answering (longer than the client's read timeout = a timeout)
    trickle_s: float = 0.0  # send the body 8 bytes at a time, this long apart (each read is quick)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or the raw text when it was not JSON


class FakeLlm:
    def __init__(self, *, model: str = "fake-model", require_key: str | None = None) -> None:
        self.model = model
        self.require_key = require_key
        self.requests: list[Seen] = []
        self.default: Reply = Reply(500, {"error": {"message": "nothing scripted", "type": "server_error"}})
        self._script: list[Reply] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    # ---- lifecycle -----------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeLlm:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeLlm:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---- scripting -----------------------------------------------------------------------------
    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    @property
    def completions(self) -> list[Seen]:
        """The chat-completions requests received so far."""
        return [r for r in self.requests if r.method == "POST"]

    @staticmethod
    def answer(
        content: Any, *, tokens_in: int = 100, tokens_out: int = 20, model: str | None = None
    ) -> Reply:
        """A 200 whose ``choices[0].message.content`` is ``content`` (JSON-encoded unless a str)."""
        text = content if isinstance(content, str) else json.dumps(content)
        return Reply(
            200,
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "model": model or "fake-model",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": tokens_in,
                    "completion_tokens": tokens_out,
                    "total_tokens": tokens_in + tokens_out,
                },
            },
        )

    @staticmethod
    def tool_calls(*calls: tuple[str, str, dict[str, Any]], tokens_in: int = 100) -> Reply:
        """A 200 asking for tools: each call is ``(call id, tool name, arguments)``."""
        reply = FakeLlm.answer("", tokens_in=tokens_in)
        assert isinstance(reply.body, dict)
        choice = reply.body["choices"][0]
        choice["finish_reason"] = "tool_calls"
        choice["message"] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                for call_id, name, args in calls
            ],
        }
        return reply

    @staticmethod
    def prose(text: str = "Sure! The ops fail because the column does not exist.") -> Reply:
        return FakeLlm.answer(text)

    @staticmethod
    def error(
        status: int,
        message: str = "injected failure",
        *,
        type: str = "server_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        return Reply(status, {"error": {"message": message, "type": type, "code": code}}, headers or {})

    @staticmethod
    def quota() -> Reply:
        return FakeLlm.error(
            429,
            "You exceeded your current quota, please check your plan and billing details.",
            type="insufficient_quota",
            code="insufficient_quota",
        )

    @staticmethod
    def slow(seconds: float, then: Reply | None = None) -> Reply:
        reply = then or FakeLlm.answer({"late": True})
        return Reply(reply.status, reply.body, reply.headers, delay_s=seconds)

    @staticmethod
    def trickle(seconds_between: float, then: Reply | None = None) -> Reply:
        """A reply whose body arrives a few bytes at a time: no single read waits long, the whole does."""
        reply = then or FakeLlm.answer({"late": True})
        return Reply(reply.status, reply.body, reply.headers, trickle_s=seconds_between)

    # ---- serving -------------------------------------------------------------------------------
    def _next(self) -> Reply:
        with self._lock:
            return self._script.pop(0) if self._script else self.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, reply: Reply) -> None:
                body = reply.body
                data = json.dumps(body).encode() if isinstance(body, dict) else body
                data = data.encode() if isinstance(data, str) else data
                self.send_response(reply.status)
                content_type = "application/json" if isinstance(body, dict) else "text/plain"
                headers = dict(reply.headers)  # a scripted reply may be served again (the default)
                self.send_header("Content-Type", headers.pop("Content-Type", content_type))
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if not reply.trickle_s:
                    self.wfile.write(data)
                    return
                for start in range(0, len(data), 8):
                    self.wfile.write(data[start : start + 8])
                    self.wfile.flush()
                    if fake._stopping.wait(reply.trickle_s):
                        return

            def _record(self, body: Any) -> None:
                with fake._lock:
                    fake.requests.append(Seen(self.command, self.path, dict(self.headers), body))

            def do_GET(self) -> None:
                self._record(None)
                if not self.path.rstrip("/").endswith("/models"):
                    self._send(Reply(404, {"error": {"message": f"no route {self.path}"}}))
                    return
                if fake.require_key and self.headers.get("Authorization") != f"Bearer {fake.require_key}":
                    self._send(Reply(401, {"error": {"message": "missing or wrong API key"}}))
                    return
                self._send(Reply(200, {"object": "list", "data": [{"id": fake.model, "object": "model"}]}))

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw
                self._record(body)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(Reply(404, {"error": {"message": f"no route {self.path}"}}))
                    return
                if fake.require_key and self.headers.get("Authorization") != f"Bearer {fake.require_key}":
                    self._send(Reply(401, {"error": {"message": "Incorrect API key provided"}}))
                    return
                reply = fake._next()
                if reply.delay_s and fake._stopping.wait(reply.delay_s):
                    return
                if isinstance(body, dict) and body.get("stream") and reply.status == 200:
                    reply = _streamed(reply)
                with contextlib.suppress(OSError):  # the client gave up (read timeout) and left
                    self._send(reply)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def _streamed(reply: Reply) -> Reply:
    """A scripted chat completion as the server-sent events of ``stream: true`` (clients such as
    Strands Agents and LangChain's streaming mode ask for them): one chunk of content or tool calls,
    then the finish reason with the usage, then ``[DONE]``."""
    if not isinstance(reply.body, dict) or "choices" not in reply.body:
        return reply
    completion = reply.body
    message, finish = completion["choices"][0]["message"], completion["choices"][0]["finish_reason"]
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    base = {key: completion[key] for key in ("id", "model")} | {
        "object": "chat.completion.chunk",
        "created": 0,
    }
    chunks = [
        base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        base | {"choices": [], "usage": completion.get("usage")},
    ]
    events = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
    return Reply(
        200, events, {**reply.headers, "Content-Type": "text/event-stream"}, reply.delay_s, reply.trickle_s
    )
