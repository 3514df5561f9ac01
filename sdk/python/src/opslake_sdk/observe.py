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
from typing import TYPE_CHECKING, Any, Literal, TypeVar

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


def exception_text(exc: BaseException) -> str:
    """The exception's message, or its class name when it has none or cannot say it (a
    ``__str__`` that raises must not cost the op)."""
    try:
        return str(exc) or type(exc).__name__
    except Exception:
        return type(exc).__name__


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
                self.error = exception_text(exc)
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
    func: Any,
    *,
    endpoint: str | None,
    capture_args: bool,
    capture_result: bool,
    summarize_args: Summarizer | None,
    summarize_result: Summarizer | None,
    op_options: Mapping[str, Any],
) -> Any:
    """``func`` wrapped so that each call becomes one op, and still what it was: a coroutine
    function stays one, a generator function (sync or async) stays one and its op covers the
    iteration, a ``classmethod``/``staticmethod`` (decorated above or below) stays one.
    Frameworks tell tools apart with :mod:`inspect`; the decorator must not change the answer."""
    if isinstance(func, classmethod | staticmethod):  # ``@observe`` written above ``@classmethod``
        inner = observe_function(
            client,
            func.__func__,
            endpoint=endpoint,
            capture_args=capture_args,
            capture_result=capture_result,
            summarize_args=summarize_args,
            summarize_result=summarize_result,
            op_options=op_options,
        )
        return type(func)(inner)
    name = endpoint or f"tool:{getattr(func, '__name__', 'call')}"
    skip = 1 if _skips_first(func) else 0

    def begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Op | None:
        try:
            op = Op(client, name, **op_options)
        except Exception:
            client._internal_error("starting an op failed")
            return None
        try:
            if summarize_args is not None:
                op.input = summarize_args(*args, **kwargs)
            elif capture_args:
                op.input = summarize_call(args[skip:], kwargs)
        except Exception:  # a broken summarizer costs the summary, not the op
            client._internal_error("summarizing the arguments failed")
        return op.start()

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

    def end_stream(op: Op | None, kind: str, items: int, exc: BaseException | None, closed: bool) -> None:
        if op is None:
            return
        if exc is None and capture_result:
            op.output = f"<{kind}: {items} items{', closed early' if closed else ''}>"
        op.finish(exc)

    if inspect.isasyncgenfunction(func):

        @functools.wraps(func)
        async def async_gen_wrapper(*args: Any, **kwargs: Any) -> Any:
            op = begin(args, kwargs)
            agen = func(*args, **kwargs)
            items = 0
            try:
                value = await agen.asend(None)
                while True:
                    items += 1
                    try:
                        sent = yield value
                    except GeneratorExit:
                        await agen.aclose()
                        raise
                    except BaseException as thrown:  # athrow(): the tool's generator may handle it
                        value = await agen.athrow(thrown)
                    else:
                        value = await agen.asend(sent)
            except StopAsyncIteration:
                end_stream(op, "async generator", items, None, closed=False)
            except GeneratorExit:
                end_stream(op, "async generator", items, None, closed=True)
                raise
            except BaseException as exc:
                end_stream(op, "async generator", items, exc, closed=False)
                raise

        return async_gen_wrapper

    if inspect.isgeneratorfunction(func):

        @functools.wraps(func)
        def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
            op = begin(args, kwargs)
            counter = _Counting(func(*args, **kwargs))
            try:
                result = yield from counter  # send() and throw() go through to the tool's generator
            except GeneratorExit:
                end_stream(op, "generator", counter.items, None, closed=True)
                raise
            except BaseException as exc:
                end_stream(op, "generator", counter.items, exc, closed=False)
                raise
            end_stream(op, "generator", counter.items, None, closed=False)
            return result

        return gen_wrapper

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

        return async_wrapper

    async def awaited(op: Op | None, coro: Any) -> Any:
        try:
            result = await coro
        except BaseException as exc:
            end(op, exc=exc)
            raise
        end(op, result)
        return result

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        op = begin(args, kwargs)
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            end(op, exc=exc)
            raise
        if inspect.iscoroutine(result):  # an async tool behind a plain wrapper: its op ends when awaited
            return awaited(op, result)
        end(op, result)
        return result

    return wrapper


class _Counting:
    """A generator seen through ``yield from``, counting what it yields (send/throw/close pass
    through to it, as ``yield from`` does for any iterator that has them)."""

    def __init__(self, gen: Any) -> None:
        self.gen = gen
        self.items = 0

    def __iter__(self) -> _Counting:
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def send(self, value: Any) -> Any:
        item = self.gen.send(value)
        self.items += 1
        return item

    def throw(self, *args: Any) -> Any:
        item = self.gen.throw(*args)
        self.items += 1
        return item

    def close(self) -> None:
        self.gen.close()
