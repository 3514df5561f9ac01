"""Observing a tool call: a context manager (:class:`Op`) and the decorator built on it.

What a runtime would report for the call: how long it took, whether it raised, the exception's
type (``error_type``) and message (``error``), bounded summaries of the arguments and the result.
The agent's own exception leaves the ``with`` block (or the decorated function) unchanged, and its
return value is returned as it is; what the SDK does around it can neither raise nor block.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from opslake_sdk.ops import bounded_repr, summarize_call, utc_now

if TYPE_CHECKING:
    from opslake_sdk.client import Opslake

log = logging.getLogger("opslake_sdk")

F = TypeVar("F", bound=Callable[..., Any])
Summarizer = Callable[..., Any]

#: Ids set for a stretch of code (``client.context(...)``): each op inside takes them as defaults.
_CONTEXT: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "opslake_sdk_context", default=MappingProxyType({})
)
CONTEXT_FIELDS = ("agent_id", "session_id", "task_class", "trace_id")


@contextmanager
def op_context(**ids: str | None) -> Iterator[None]:
    """Within the block (this thread or task, and tasks it starts), ops default to these ids."""
    token = _CONTEXT.set({**_CONTEXT.get(), **{k: v for k, v in ids.items() if v is not None}})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def context_ids() -> Mapping[str, str]:
    return _CONTEXT.get()


class Op:
    """One observed operation, timed from ``__enter__`` to ``__exit__`` (``with`` or ``async with``).

    Inside the block, set ``op.output`` (summarised at exit), add ``op.attributes``, or call
    :meth:`fail` for a failure that raised nothing. An exception leaving the block marks the op
    failed and goes on unchanged.
    """

    def __init__(
        self,
        client: Opslake,
        endpoint: str,
        *,
        input: Any = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        task_class: str | None = None,
        trace_id: str | None = None,
        event_kind: str | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> None:
        self._client = client
        self.endpoint = endpoint
        self.input = input
        self.output: Any = None
        self.ids = {
            "agent_id": agent_id,
            "session_id": session_id,
            "task_class": task_class,
            "trace_id": trace_id,
        }
        self.event_kind = event_kind
        self.attributes: dict[str, Any] = dict(attributes or {})
        self.success = True
        self.error: str | None = None
        self.error_type: str | None = None
        self.op_id: str | None = None  # set once the op is recorded
        self._start = 0.0
        self._ts: str | None = None
        self._context = dict(context_ids())

    def fail(self, error: str, error_type: str = "Failure") -> None:
        """Mark the op failed without an exception (a tool that answered with an error)."""
        self.success, self.error, self.error_type = False, error, error_type

    def start(self) -> Op:
        self._ts = utc_now()  # the op's ts is when it began, as for a span
        self._start = time.perf_counter()
        return self

    def finish(self, exc: BaseException | None = None) -> None:
        """Record the op; never raises (an SDK failure is logged and counted)."""
        try:
            duration_ms = (time.perf_counter() - self._start) * 1000.0
            if exc is not None:
                self.success = False
                self.error_type = type(exc).__name__
                self.error = str(exc) or type(exc).__name__
            ids = {name: self.ids[name] or self._context.get(name) for name in CONTEXT_FIELDS}
            self.op_id = self._client.record(
                endpoint=self.endpoint,
                success=self.success,
                duration_ms=duration_ms,
                ts=self._ts,
                error=self.error,
                error_type=self.error_type,
                input_summary=None if self.input is None else bounded_repr(self.input),
                output_summary=None if self.output is None else bounded_repr(self.output),
                attributes=self.attributes,
                event_kind=self.event_kind,
                **ids,
            )
        except Exception:
            self._client._internal_error("recording an op failed")

    def __enter__(self) -> Op:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        self.finish(exc)
        return False  # never swallow the agent's exception

    async def __aenter__(self) -> Op:
        return self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        self.finish(exc)
        return False


def _skips_first(func: Callable[..., Any]) -> bool:
    """Whether the first positional argument is ``self``/``cls`` (not worth a summary)."""
    try:
        params = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0] in ("self", "cls")


def observe_function(
    client: Opslake,
    func: F,
    *,
    endpoint: str | None,
    capture_args: bool,
    capture_result: bool,
    summarize_args: Summarizer | None,
    summarize_result: Summarizer | None,
    op_options: Mapping[str, Any],
) -> F:
    """``func`` (sync or async) wrapped so that each call becomes one op."""
    name = endpoint or f"tool:{getattr(func, '__name__', 'call')}"
    skip = 1 if _skips_first(func) else 0

    def begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Op | None:
        try:
            op = Op(client, name, **op_options)
            if summarize_args is not None:
                op.input = summarize_args(*args, **kwargs)
            elif capture_args:
                op.input = summarize_call(args[skip:], kwargs)
            return op.start()
        except Exception:
            client._internal_error("starting an op failed")
            return None

    def end(op: Op | None, result: Any = None, exc: BaseException | None = None) -> None:
        if op is None:
            return
        try:
            if exc is None and summarize_result is not None:
                op.output = summarize_result(result)
            elif exc is None and capture_result:
                op.output = result
        except Exception:
            client._internal_error("summarizing a result failed")
        op.finish(exc)

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            op = begin(args, kwargs)
            try:
                result = await func(*args, **kwargs)
            except BaseException as exc:
                end(op, exc=exc)
                raise
            end(op, result)
            return result

        return cast(F, async_wrapper)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        op = begin(args, kwargs)
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            end(op, exc=exc)
            raise
        end(op, result)
        return result

    return cast(F, wrapper)
