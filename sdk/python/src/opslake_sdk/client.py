"""The client: configuration, the observing decorator and context manager, the read side.

``Opslake()`` reads ``OPSLAKE_URL``, ``OPSLAKE_API_KEY`` and ``OPSLAKE_AGENT_ID`` when they are not
given. Without a URL or key it still works as a decorator (the agent's calls run as before) but
sends nothing, says so once in the log and counts each op as dropped.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from typing import Any, overload

import httpx

from opslake_sdk import __version__
from opslake_sdk.forks import reset_after_fork
from opslake_sdk.observe import CONTEXT_FIELDS, F, Op, Summarizer, context_ids, observe_function, op_context
from opslake_sdk.ops import (
    MAX_ATTRIBUTE_VALUE_CHARS,
    MAX_OPS_PER_REQUEST,
    MAX_REQUEST_BYTES,
    build_op,
    clean_id,
    clean_source,
)
from opslake_sdk.playbooks import PlaybookCache, PlaybookEntry, Playbooks, fetch, query_params
from opslake_sdk.retry import RetryPolicy
from opslake_sdk.stats import Stats
from opslake_sdk.worker import MAX_QUEUE_BYTES, Pipeline

log = logging.getLogger("opslake_sdk")

ENV_URL = "OPSLAKE_URL"
ENV_API_KEY = "OPSLAKE_API_KEY"
ENV_AGENT_ID = "OPSLAKE_AGENT_ID"
#: What ``report_followed`` records: read by the consolidator to measure entries on their followers.
FOLLOWED_ENDPOINT = "playbook:followed"
FOLLOWED_EVENT_KIND = "playbook_followed"
SESSION_HEADER = "x-opslake-session-id"
TASK_CLASS_HEADER = "x-opslake-task-class"


def base_url(url: str | None) -> str | None:
    """The API's base URL: no trailing slash, and a route's URL pasted instead (``…/events``,
    ``…/v1/traces``) taken back to it (the SDK adds the routes itself)."""
    text = (url or "").strip().rstrip("/")
    for route in ("/events", "/v1/traces", "/playbooks"):
        if text.lower().endswith(route):
            log.warning("opslake URL %r names a route; using the API's base URL", text)
            text = text[: -len(route)].rstrip("/")
    return text or None


def _close_at_multiprocessing_exit(client: Opslake) -> None:
    """In a process multiprocessing started by forking: send the child's ops as it exits."""
    import multiprocessing.util

    multiprocessing.util.Finalize(None, client._close_at_exit, exitpriority=10)


class Opslake:
    """Reports an agent's tool calls to ``POST /events`` and reads ``GET /playbooks``.

    Ops are queued (at most ``max_queue``; more are dropped and counted) and sent by a daemon
    thread in batches of at most ``max_batch_ops`` ops and ``max_batch_bytes`` bytes, every
    ``flush_interval`` seconds or as soon as a batch is full. Failed sends (503, 429, other 5xx,
    network errors) are retried with the same op ids, ``Retry-After`` honoured, each wait capped at
    ``max_backoff`` seconds, ``max_attempts`` sends at most. At interpreter exit the queue is sent
    within ``exit_timeout`` seconds. ``transport`` (an ``httpx`` transport) or ``http_client`` (an
    ``httpx.Client`` whose ``base_url`` is the API's) replace the network, e.g. in tests.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        agent_id: str | None = None,
        source: str | None = "sdk",
        max_queue: int = 10_000,
        max_queue_bytes: int = MAX_QUEUE_BYTES,
        flush_interval: float = 1.0,
        max_batch_ops: int = MAX_OPS_PER_REQUEST,
        max_batch_bytes: int = MAX_REQUEST_BYTES,
        request_timeout: float = 10.0,
        read_timeout: float = 5.0,
        max_attempts: int = 6,
        backoff_base: float = 0.5,
        max_backoff: float = 30.0,
        exit_timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self.url = base_url(url or os.environ.get(ENV_URL))
        self._api_key = api_key or os.environ.get(ENV_API_KEY) or None
        self.agent_id = clean_id(agent_id or os.environ.get(ENV_AGENT_ID))
        self.source = clean_source(source)
        if self.source != clean_id(source):
            log.warning(
                "opslake: source %r is reserved for opslake's own records; using %r", source, self.source
            )
        self.read_timeout = read_timeout
        self.exit_timeout = exit_timeout
        if self.url and not self.url.lower().startswith(("http://", "https://")):
            log.warning("opslake URL %r is not http(s)://…: ops will not be sent", self.url)
            self.url = None
        self.enabled = http_client is not None or bool(self.url and self._api_key)
        if not self.enabled:
            missing = [
                name for name, value in ((ENV_URL, self.url), (ENV_API_KEY, self._api_key)) if not value
            ]
            log.warning("opslake is not configured (%s missing): ops will not be sent", ", ".join(missing))
        self._transport = transport
        self._http_client = http_client
        self._playbook_cache = PlaybookCache()
        self._pipeline = Pipeline(
            self._new_http_client,
            max_queue=max_queue,
            max_queue_bytes=max_queue_bytes,
            flush_interval_s=flush_interval,
            max_batch_ops=max_batch_ops,
            max_batch_bytes=max_batch_bytes,
            request_timeout_s=request_timeout,
            close_client=http_client is None,  # a client given to us stays the caller's to close
            retry=RetryPolicy(
                max_attempts=max(1, max_attempts), base_s=backoff_base, max_backoff_s=max_backoff
            ),
        )
        self._reader: httpx.Client | None = None
        self._read_pool: ThreadPoolExecutor | None = None
        self._reader_lock = threading.Lock()
        reset_after_fork(self)
        atexit.register(self._close_at_exit)

    def _after_fork(self) -> None:
        """In a forked child: a lock of our own, and the parent's pooled connections left alone
        (closing them here could end the parent's TLS sessions; using them would mix two
        processes' requests on one socket)."""
        self._reader_lock = threading.Lock()
        self._reader = None
        self._read_pool = None  # its threads are the parent's
        self._playbook_cache.after_fork()
        # A multiprocessing child leaves through os._exit: atexit never runs there, only
        # multiprocessing's finalizers do (those it registers after its own reset of them).
        mp_util = sys.modules.get("multiprocessing.util")
        if mp_util is not None and self.enabled:
            mp_util.register_after_fork(self, _close_at_multiprocessing_exit)

    def __repr__(self) -> str:
        return f"Opslake(url={self.url!r}, agent_id={self.agent_id!r}, enabled={self.enabled})"

    # ---- plumbing -----------------------------------------------------------------------------

    def _new_http_client(self) -> httpx.Client:
        """The sender's HTTP client (the reader has its own: a slow batch must not hold a read)."""
        if self._http_client is not None:
            return self._http_client
        return httpx.Client(
            base_url=self.url or "http://opslake.invalid",
            headers={"x-api-key": self._api_key or "", "user-agent": f"opslake-sdk/{__version__}"},
            transport=self._transport,
        )

    def _internal_error(self, what: str) -> None:
        """An SDK failure: logged with its traceback and counted, never raised to the agent."""
        log.exception("opslake: %s", what)
        self._pipeline.count("errors")

    def _close_at_exit(self) -> None:
        try:
            self.close(timeout=self.exit_timeout)
        except Exception:
            log.exception("opslake: closing at exit failed")

    # ---- writing ops --------------------------------------------------------------------------

    def record(
        self,
        *,
        endpoint: str,
        success: bool,
        duration_ms: float,
        op_id: str | None = None,
        ts: str | datetime | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        task_class: str | None = None,
        trace_id: str | None = None,
        event_kind: str | None = None,
        error: str | None = None,
        error_type: str | None = None,
        input_summary: Any = None,
        output_summary: Any = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> str | None:
        """Queue one op as it is (the decorator and :meth:`op` build it for you); its op id, or
        None if it could not be queued. Never raises, never waits on the network."""
        try:
            context = context_ids()
            op = build_op(
                endpoint=endpoint,
                success=success,
                duration_ms=duration_ms,
                op_id=op_id,
                ts=ts,
                agent_id=agent_id or context.get("agent_id") or self.agent_id,
                session_id=session_id or context.get("session_id"),
                task_class=task_class or context.get("task_class"),
                trace_id=trace_id or context.get("trace_id"),
                source=self.source,
                event_kind=event_kind,
                error=error,
                error_type=error_type,
                input_summary=input_summary,
                output_summary=output_summary,
                attributes=attributes,
            )
            if not self.enabled:
                self._pipeline.count("dropped")
                return None
            return str(op["op_id"]) if self._pipeline.put(op) else None
        except Exception:
            self._internal_error("queuing an op failed")
            return None

    def op(
        self,
        endpoint: str,
        *,
        input: Any = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        task_class: str | None = None,
        trace_id: str | None = None,
        event_kind: str | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> Op:
        """A context manager (``with`` or ``async with``) that observes the block as one op."""
        return Op(
            self,
            endpoint,
            input=input,
            agent_id=agent_id,
            session_id=session_id,
            task_class=task_class,
            trace_id=trace_id,
            event_kind=event_kind,
            attributes=attributes,
        )

    @overload
    def observe(self, endpoint: F) -> F: ...

    @overload
    def observe(
        self,
        endpoint: str | None = None,
        *,
        capture_args: bool = True,
        capture_result: bool = True,
        summarize_args: Summarizer | None = None,
        summarize_result: Summarizer | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        task_class: str | None = None,
        event_kind: str | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> Callable[[F], F]: ...

    def observe(
        self,
        endpoint: Any = None,
        *,
        capture_args: bool = True,
        capture_result: bool = True,
        summarize_args: Summarizer | None = None,
        summarize_result: Summarizer | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        task_class: str | None = None,
        event_kind: str | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> Any:
        """Decorate a tool function (sync or async): each call becomes one op, ``endpoint``
        ``tool:<function name>`` unless given. ``@ol.observe`` and ``@ol.observe(...)`` both work.
        Arguments and result are summarised with a bounded ``repr`` (``capture_args=False`` /
        ``capture_result=False`` leave them out; ``summarize_args(*args, **kwargs)`` and
        ``summarize_result(result)`` give your own text). The decorated function stays what it
        was for :mod:`inspect` (coroutine function, generator or async generator function,
        classmethod, staticmethod); a generator's op covers its iteration, from the first item to
        the last (or the exception, or the consumer closing it early)."""
        options = {
            "agent_id": agent_id,
            "session_id": session_id,
            "task_class": task_class,
            "event_kind": event_kind,
            "attributes": attributes,
        }

        def decorate(func: Any) -> Any:
            return observe_function(
                self,
                func,
                endpoint=endpoint if isinstance(endpoint, str) else None,
                capture_args=capture_args,
                capture_result=capture_result,
                summarize_args=summarize_args,
                summarize_result=summarize_result,
                op_options=options,
            )

        if isinstance(endpoint, classmethod | staticmethod) or (
            callable(endpoint) and not isinstance(endpoint, str)
        ):
            return decorate(endpoint)  # bare @ol.observe (a classmethod object is not callable)
        return decorate

    @contextmanager
    def context(self, **ids: str | None) -> Iterator[None]:
        """Within the block, ops default to these ids (``session_id``, ``task_class``,
        ``agent_id``, ``trace_id``): set them once per agent run rather than on every tool."""
        unknown = set(ids) - set(CONTEXT_FIELDS)
        if unknown:
            raise TypeError(f"unknown context fields: {sorted(unknown)} (known: {list(CONTEXT_FIELDS)})")
        with op_context(**ids):
            yield

    # ---- reading playbooks --------------------------------------------------------------------

    def playbooks(
        self,
        *,
        endpoint: str | None = None,
        task_class: str | None = None,
        q: str | None = None,
        limit: int | None = None,
        session_id: str | None = None,
    ) -> Playbooks:
        """The active playbook entries for an endpoint or task class (and words ``q``), most
        confident first. Cached per query by ETag: an unchanged answer costs a 304. Never raises:
        if opslake cannot be read, the last entries for this query (or none) come back ``stale``."""
        try:
            if not self.enabled:
                return Playbooks(stale=True, error="opslake is not configured")
            context = context_ids()
            headers = {
                SESSION_HEADER: session_id or context.get("session_id"),
                TASK_CLASS_HEADER: task_class or context.get("task_class"),
            }
            answer, reached = fetch(
                self._read_client(),
                self._playbook_cache,
                query_params(endpoint, task_class, q, limit),
                headers={k: v for k, v in headers.items() if v},
                timeout=self.read_timeout,
            )
            self._pipeline.count("playbook_requests")
            if answer.not_modified:
                self._pipeline.count("playbook_not_modified")
            if not reached:
                self._pipeline.count("playbook_errors")
            return answer
        except Exception as exc:
            self._internal_error("reading playbooks failed")
            return Playbooks(stale=True, error=f"{type(exc).__name__}: {exc}")

    async def aplaybooks(
        self,
        *,
        endpoint: str | None = None,
        task_class: str | None = None,
        q: str | None = None,
        limit: int | None = None,
        session_id: str | None = None,
    ) -> Playbooks:
        """:meth:`playbooks` for async agents: the read runs in a worker thread, so the event loop
        goes on meanwhile (same cache, same answers, never raises)."""
        context = contextvars.copy_context()  # the caller's ol.context(...) ids go along

        def read() -> Playbooks:
            return context.run(
                self.playbooks,
                endpoint=endpoint,
                task_class=task_class,
                q=q,
                limit=limit,
                session_id=session_id,
            )

        try:
            future = asyncio.get_running_loop().run_in_executor(self._executor(), read)
        except Exception as exc:  # e.g. no thread can be started at interpreter exit
            self._internal_error("reading playbooks failed")
            return Playbooks(stale=True, error=f"{type(exc).__name__}: {exc}")
        return await future

    def _executor(self) -> ThreadPoolExecutor:
        """The reads' own small pool: not the loop's default one, which the agent's
        ``asyncio.to_thread`` calls may fill (or a closing loop may have shut down)."""
        with self._reader_lock:
            if self._read_pool is None:
                self._read_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="opslake-sdk-read")
            return self._read_pool

    def _read_client(self) -> httpx.Client:
        if self._http_client is not None:
            return self._http_client
        with self._reader_lock:
            if self._reader is None:
                self._reader = self._new_http_client()
            return self._reader

    def report_followed(
        self,
        entry_ids: str | PlaybookEntry | Playbooks | Iterable[str | PlaybookEntry],
        *,
        task_class: str | None = None,
        session_id: str | None = None,
        endpoint: str | None = None,
    ) -> str | None:
        """Record which playbook entries the agent followed (for the tool ``endpoint``, if given),
        as one op: ``endpoint`` "playbook:followed", ``event_kind`` "playbook_followed", the ids
        comma-separated in ``attributes.entry_ids``. ``entry_ids``: ids, entries, a whole
        :meth:`playbooks` answer, or one id. Returns its op id (None if nothing was queued)."""
        try:
            items = [entry_ids] if isinstance(entry_ids, str | PlaybookEntry) else list(entry_ids)
            ids: list[str] = []
            for item in items:
                text = clean_id(item.entry_id if isinstance(item, PlaybookEntry) else item)
                if text and "," not in text and text not in ids:
                    ids.append(text)
            if not ids:
                return None
            joined = ",".join(ids)
            if len(joined) > MAX_ATTRIBUTE_VALUE_CHARS:  # keep whole ids only
                joined = joined[:MAX_ATTRIBUTE_VALUE_CHARS].rsplit(",", 1)[0]
                log.warning(
                    "opslake: report_followed kept %d of %d entry ids", joined.count(",") + 1, len(ids)
                )
            attributes: dict[str, Any] = {"entry_ids": joined}
            if endpoint:
                attributes["for_endpoint"] = endpoint
            return self.record(
                endpoint=FOLLOWED_ENDPOINT,
                event_kind=FOLLOWED_EVENT_KIND,
                success=True,
                duration_ms=0.0,
                task_class=task_class,
                session_id=session_id,
                attributes=attributes,
            )
        except Exception:
            self._internal_error("report_followed failed")
            return None

    # ---- lifecycle ----------------------------------------------------------------------------

    @property
    def stats(self) -> Stats:
        """The counters so far (see :class:`Stats`)."""
        return self._pipeline.stats()

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Send what is queued now and wait (at most ``timeout`` seconds) until each of those ops
        is accepted, rejected or given up; True if all were. Never raises."""
        try:
            return self._pipeline.flush(timeout)
        except Exception:
            self._internal_error("flush failed")
            return False

    def close(self, timeout: float | None = 5.0) -> bool:
        """Send what is queued (within ``timeout`` seconds), then stop; later ops are dropped and
        counted. True if every op was settled. Called at interpreter exit; safe to call twice."""
        try:
            atexit.unregister(self._close_at_exit)
            settled = self._pipeline.close(timeout)
            with self._reader_lock:
                if self._reader is not None:
                    self._reader.close()
                    self._reader = None
                if self._read_pool is not None:
                    self._read_pool.shutdown(wait=False)
                    self._read_pool = None
            return settled
        except Exception:
            self._internal_error("close failed")
            return False

    def __enter__(self) -> Opslake:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
