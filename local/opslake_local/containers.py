"""Lambda's scale-out, locally: concurrent invocations run in separate processes ("containers").

In AWS each concurrent request to a function gets a container of its own. The in-process
:class:`~opslake_local.invoke.Invoker` is one container per function: requests wait for each other
and, with the moto server, the HTTP front and the queue drainer, share one interpreter lock, so a
fleet posting to ``POST /events`` was held to one core's worth of validation and redaction.
:class:`ContainerPool` runs invocations in ``containers`` worker processes instead, each with an
``Invoker`` of its own (its own cold start, one invocation at a time), the stack's environment and
the moto server reached over HTTP as from Lambda. The stack's :class:`QuiesceGate` is held in this
process while a container works, so checkpoints still see no invocation half-way.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import queue
import signal
import threading
import traceback
from collections.abc import Iterable, Mapping
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

from opslake_local.invoke import FunctionError

if TYPE_CHECKING:
    from opslake_local.stack import LocalStack
    from opslake_local.template import Template


class ContainerFailed(Exception):
    """What a container reported instead of a result (the handler's exception, as text)."""


def _serve(
    conn: Connection, template: Template, env_overrides: dict[str, str], environ: dict[str, str]
) -> None:
    """A container's loop: invoke what the pool sends, answer with the JSON result or the error."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the pool stops us
    os.environ.clear()
    os.environ.update(environ)
    from opslake_local.invoke import Invoker

    invoker = Invoker(template, env_overrides=env_overrides)
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        kind, logical_id, payload = request
        try:
            if kind == "warm":
                invoker.handler(logical_id)
                conn.send(("ok", "null"))
                continue
            result = invoker.invoke(logical_id, json.loads(payload))
            conn.send(("ok", json.dumps(result)))
        except FunctionError as exc:
            cause = exc.__cause__ or exc
            conn.send(("error", f"{type(cause).__name__}: {cause}\n{traceback.format_exc()}"))
        except Exception as exc:  # the container itself failed (an import, a KeyError for a name)
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


class _Container:
    """One worker process and the pipe to it."""

    def __init__(self, stack: LocalStack) -> None:
        context = multiprocessing.get_context("spawn")  # no threads or sockets of this process copied
        self.conn, child = context.Pipe()
        self.process: BaseProcess = context.Process(
            target=_serve,
            args=(child, stack.template, dict(stack.env_overrides), dict(os.environ)),
            name="opslake-container",
            daemon=True,
        )
        self.process.start()
        child.close()
        self.invocations = 0

    def call(self, kind: str, logical_id: str, payload: str) -> Any:
        self.invocations += kind == "invoke"
        self.conn.send((kind, logical_id, payload))
        status, answer = self.conn.recv()
        if status != "ok":
            raise ContainerFailed(answer)
        return json.loads(answer)

    def stop(self) -> None:
        with contextlib.suppress(OSError):  # already gone
            self.conn.send(None)
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
        self.conn.close()


class ContainerPool:
    """An invoker whose invocations run in ``containers`` worker processes: at most that many at
    once, each container one invocation at a time (as Lambda's containers), any function of the
    template in any container. Drop-in for :class:`~opslake_local.invoke.Invoker` where only
    ``invoke`` is used (the local HTTP API); ``close()`` stops the processes.

    Start it while the stack runs: containers copy this process's environment (the moto endpoint,
    the functions' variables) when they start.
    """

    def __init__(self, stack: LocalStack, containers: int = 2) -> None:
        if containers < 1:
            raise ValueError("a pool needs at least one container")
        self.stack = stack
        self.template = stack.template
        self.functions = stack.template.functions()
        self._idle: queue.SimpleQueue[_Container] = queue.SimpleQueue()
        self._all = [_Container(stack) for _ in range(containers)]
        for container in self._all:
            self._idle.put(container)
        self._lock = threading.Lock()
        self._closed = False

    def warm(self, logical_ids: Iterable[str]) -> None:
        """Import the handlers of ``logical_ids`` in every container now (their cold starts),
        as provisioned concurrency would."""
        taken = [self._idle.get() for _ in self._all]
        try:
            for container in taken:
                for logical_id in logical_ids:
                    container.call("warm", logical_id, "null")
        finally:
            for container in taken:
                self._idle.put(container)

    def invoke(self, logical_id: str, event: Mapping[str, Any]) -> Any:
        """Invoke ``logical_id`` in the next free container (waits for one); the result is JSON
        round-tripped as from Lambda. A handler's exception is a :class:`FunctionError`."""
        if logical_id not in self.functions:
            known = ", ".join(sorted(self.functions))
            raise KeyError(f"no function {logical_id!r} in the template (known: {known})")
        payload = json.dumps(event)
        container = self._idle.get()
        try:
            with self.stack.gate.shared():
                return container.call("invoke", logical_id, payload)
        except ContainerFailed as exc:
            raise FunctionError(logical_id, exc) from exc
        except (EOFError, BrokenPipeError, OSError) as exc:  # the process died: replace it
            container.stop()
            container = self._replace(container)
            raise FunctionError(logical_id, exc) from exc
        finally:
            self._idle.put(container)

    def _replace(self, dead: _Container) -> _Container:
        with self._lock:
            fresh = _Container(self.stack)
            self._all[self._all.index(dead)] = fresh
            return fresh

    def close(self) -> None:
        """Stop every container (waiting for the invocation each is in)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for container in self._all:
            container.stop()
