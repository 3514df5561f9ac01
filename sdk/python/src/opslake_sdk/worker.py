"""The bounded buffer and the background thread that sends it to ``POST /events``.

A tool call only appends its op to the buffer (a lock, a deque, no I/O). One daemon thread sends
batches: when ``max_batch_ops`` are waiting, when ``flush_interval_s`` has passed since the first
of them arrived, at once when someone waits in :meth:`Pipeline.flush`, and until the buffer is
empty (or the time is up) on :meth:`Pipeline.close`. A batch holds at most 500 ops and 1 MiB, the
server's request limits. A failed batch is resent with the same op ids (see :mod:`retry`) while
later ops wait in the buffer; a full buffer (by count or by size) turns new ops away and counts
them. A 413 halves the batch (and the batch size from then on) instead of losing it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import httpx

from opslake_sdk.forks import reset_after_fork
from opslake_sdk.ops import MAX_OPS_PER_REQUEST, MAX_REQUEST_BYTES, fit_record, op_size
from opslake_sdk.retry import RetryPolicy
from opslake_sdk.sender import Outcome, batch_body, post_batch
from opslake_sdk.stats import Counters, Stats

log = logging.getLogger("opslake_sdk")

_BATCH_OVERHEAD = len(batch_body([]))
#: Default bound of the buffer in (estimated) bytes: ops are at most ~64 KiB each, so 10,000 of the
#: largest would hold ~640 MB of an agent's memory; typical ops are ~1 KB, far below this.
MAX_QUEUE_BYTES = 64 * 1024 * 1024
Item = tuple[dict[str, Any] | bytes, int]  # an op (or its encoding) and its size estimate


class Pipeline:
    """Buffer → batches → ``POST /events``, on a thread of its own (started on the first op)."""

    def __init__(
        self,
        client_factory: Callable[[], httpx.Client],
        *,
        max_queue: int = 10_000,
        max_queue_bytes: int = MAX_QUEUE_BYTES,
        flush_interval_s: float = 1.0,
        max_batch_ops: int = MAX_OPS_PER_REQUEST,
        max_batch_bytes: int = MAX_REQUEST_BYTES,
        request_timeout_s: float = 10.0,
        retry: RetryPolicy | None = None,
        close_client: bool = True,
    ) -> None:
        self._client_factory = client_factory
        self._close_client = close_client
        self.max_queue = max(1, max_queue)
        self.max_queue_bytes = max(1, max_queue_bytes)
        self.flush_interval_s = max(0.0, flush_interval_s)
        self.max_batch_ops = min(max(1, max_batch_ops), MAX_OPS_PER_REQUEST)
        self.max_batch_bytes = min(max(1024, max_batch_bytes), MAX_REQUEST_BYTES)
        self.request_timeout_s = request_timeout_s
        self.retry = retry or RetryPolicy()
        self._closed = False
        self._reset()
        reset_after_fork(self)

    def _after_fork(self) -> None:
        self._reset()

    def _reset(self) -> None:
        """Fresh state for this process (also the child's after a fork: threads and locks of the
        parent do not carry over, and its ops are the parent's to send). A closed pipeline stays
        closed."""
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._buffer: deque[Item] = deque()
        self._buffer_bytes = 0
        self._counters = Counters()
        self._thread: threading.Thread | None = None
        self._client: httpx.Client | None = None
        self._flush_waiters = 0
        self._deadline: float | None = None  # monotonic time close() gives the worker

    # ---- the agent's side: never blocks on the network, never raises -------------------------

    def put(self, op: dict[str, Any]) -> bool:
        """Queue one op; False (and counted as dropped) if the buffer is full or closed."""
        if self._pid != os.getpid():  # a fork that bypassed os.register_at_fork (none known)
            self._reset()
        size = op_size(op)
        warning = None  # logged once the lock is released: a slow log handler must not hold tool calls
        with self._cond:
            full = len(self._buffer) >= self.max_queue or self._buffer_bytes + size > self.max_queue_bytes
            if not (self._closed or full):
                self._buffer.append((op, size))
                self._buffer_bytes += size
                self._counters.add("queued")
                if len(self._buffer) == 1 or len(self._buffer) == self.max_batch_ops:
                    self._cond.notify_all()
                if self._thread is None:
                    self._start()
                return True
            self._counters.add("dropped")
            dropped = self._counters.values["dropped"]
            if dropped in (1, 10, 100) or dropped % 1000 == 0:
                why = (
                    "closed"
                    if self._closed
                    else f"full ({len(self._buffer)} ops, ~{self._buffer_bytes} bytes)"
                )
                warning = f"opslake buffer {why}: op dropped ({dropped} dropped so far)"
        if warning is not None:
            log.warning(warning)
        return False

    def count(self, name: str, amount: int = 1) -> None:
        """Add to a counter (e.g. ``dropped`` for an op an unconfigured client could not queue)."""
        with self._cond:
            self._counters.add(name, amount)

    def stats(self) -> Stats:
        with self._cond:
            return self._counters.snapshot()

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Send everything queued so far; True once each of those ops is settled (accepted,
        rejected or given up), False if ``timeout`` seconds passed first."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._counters.values["queued"]
            self._flush_waiters += 1
            self._cond.notify_all()
            try:
                while self._settled() < target:
                    left = None if end is None else end - time.monotonic()
                    if (left is not None and left <= 0) or self._thread is None:
                        return self._settled() >= target
                    self._cond.wait(left)
                return True
            finally:
                self._flush_waiters -= 1

    def close(self, timeout: float | None = 5.0) -> bool:
        """Stop taking ops, send what is queued within ``timeout`` seconds, stop the thread. What
        cannot be sent in time is counted as failed. True if everything was settled.

        It waits on the buffer's condition, not by joining the thread: a signal handler that
        calls it may have interrupted a tool call holding that (reentrant) lock, and a join would
        keep the sender from ever taking it."""
        with self._cond:
            if self._pid != os.getpid():
                self._reset()
            self._closed = True
            self._deadline = None if timeout is None else time.monotonic() + timeout
            self._cond.notify_all()
            end = None if timeout is None else time.monotonic() + timeout + 0.5
            current = threading.current_thread()
            while self._thread is not None and self._thread is not current and self._thread.is_alive():
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(left)
            stopped = self._thread is None or not self._thread.is_alive()
            if stopped:
                self._give_up_buffer()
            settled = self._settled() >= self._counters.values["queued"]
        if self._close_client and self._client is not None and stopped:
            self._client.close()
        return settled

    # ---- the worker thread --------------------------------------------------------------------

    def _start(self) -> None:
        thread = threading.Thread(target=self._run, name="opslake-sdk-sender", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # e.g. during interpreter shutdown: the ops wait for the next try
            log.warning("opslake: the sender thread could not start", exc_info=True)
            self._counters.add("errors")
            return
        self._thread = thread

    def _settled(self) -> int:
        v = self._counters.values
        return v["accepted"] + v["rejected"] + v["failed"]

    def _give_up_buffer(self) -> None:
        if self._buffer:
            self._counters.add("failed", len(self._buffer))
            log.warning("opslake: %d queued ops given up unsent", len(self._buffer))
            self._buffer.clear()
            self._buffer_bytes = 0

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _take(self) -> list[Item] | None:
        """Wait (the lock is held) until a batch is due, and take up to ``max_batch_ops`` ops;
        None: time to stop, or nothing to take."""
        while not self._buffer and not self._closed:
            self._cond.wait()
        due = time.monotonic() + self.flush_interval_s
        while (
            len(self._buffer) < self.max_batch_ops
            and not self._closed
            and not self._flush_waiters
            and (left := due - time.monotonic()) > 0
        ):
            self._cond.wait(left)
        if not self._buffer or self._past_deadline():
            return None
        count = min(len(self._buffer), self.max_batch_ops)
        items = [self._buffer.popleft() for _ in range(count)]
        self._buffer_bytes -= sum(size for _, size in items)
        return items

    def _encode(self, items: list[Item]) -> list[bytes]:
        """The ops that fit in one request (outside the lock: a tool call must not wait on JSON
        encoding); what would pass ``max_batch_bytes`` goes back to the front of the buffer."""
        batch: list[bytes] = []
        size = _BATCH_OVERHEAD
        broken = 0
        for position, (item, _) in enumerate(items):
            try:
                encoded = item if isinstance(item, bytes) else fit_record(item)
            except Exception:  # an op that cannot be encoded is the SDK's fault: count it, go on
                log.exception("opslake: an op could not be encoded; it is dropped")
                broken += 1
                continue
            if batch and size + len(encoded) + 1 > self.max_batch_bytes:
                with self._cond:  # starts the next batch, in order
                    back = [(encoded, len(encoded)), *items[position + 1 :]]
                    self._buffer.extendleft(reversed(back))
                    self._buffer_bytes += sum(size for _, size in back)
                break
            batch.append(encoded)
            size += len(encoded) + 1
        if broken:
            with self._cond:
                self._counters.add("errors", broken)
                self._counters.add("failed", broken)
                self._cond.notify_all()
        return batch

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    items = self._take()
                    if items is None:
                        if self._closed:
                            self._give_up_buffer()
                            return
                        continue
                batch = self._encode(items)
                if batch:
                    self._deliver(batch)
        except Exception:  # the worker must not die silently: whatever is left is counted
            log.exception("opslake sender stopped on an unexpected error")
            with self._cond:
                self._counters.add("errors")
                self._give_up_buffer()
        finally:
            with self._cond:
                self._thread = None
                self._cond.notify_all()

    def _http(self) -> httpx.Client:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    def _deliver(self, batch: list[bytes]) -> None:
        """Send one batch until it is delivered, refused, out of retries or out of time."""
        body = batch_body(batch)
        outcome: Outcome | None = None
        for attempt in range(self.retry.max_attempts):
            if attempt:
                delay = self.retry.delay(attempt, outcome.retry_after_s if outcome else None)
                if not self._sleep(delay):
                    break
            timeout = self._request_timeout()
            if timeout is None:
                break
            with self._cond:
                self._counters.add("requests")
                if attempt:
                    self._counters.add("retries")
            try:
                outcome = post_batch(self._http(), body, len(batch), timeout=timeout)
            except Exception as exc:  # a bug of ours, or of a custom transport: retried like a network error
                log.exception("opslake: sending a batch failed")
                with self._cond:
                    self._counters.add("errors")
                outcome = Outcome("retry", len(batch), reason=f"{type(exc).__name__}: {exc}")
            if outcome.kind == "split":  # 413: the same ops (same ids) in two smaller requests
                self.max_batch_bytes = max(1024, min(self.max_batch_bytes, len(body) // 2))
                half = len(batch) // 2
                log.warning(
                    "opslake: a batch of %d ops was too large (%s); sending it in halves",
                    len(batch),
                    outcome.reason,
                )
                self._deliver(batch[:half])
                self._deliver(batch[half:])
                return
            if outcome.kind != "retry":
                self._settle(outcome)
                return
            log.info("opslake: batch of %d ops not accepted (%s); will retry", len(batch), outcome.reason)
        reason = outcome.reason if outcome else "close() ran out of time"
        log.warning("opslake: giving up a batch of %d ops after %s", len(batch), reason)
        with self._cond:
            self._counters.add("failed", len(batch))
            self._counters.add("failed_batches")
            self._cond.notify_all()

    def _settle(self, outcome: Outcome) -> None:
        with self._cond:
            c = self._counters
            if outcome.kind == "delivered":
                c.add("sent", outcome.ops)
                c.add("accepted", outcome.accepted)
                c.add("rejected", outcome.rejected)
                c.add("redacted", outcome.redacted)
            else:
                c.add("rejected", outcome.ops)
                c.add("failed_batches")
            self._cond.notify_all()
        if outcome.kind != "delivered":  # logged outside the lock, as everywhere
            log.error("opslake refused a batch of %d ops: %s", outcome.ops, outcome.reason)

    def _request_timeout(self) -> float | None:
        """The request timeout, shortened to what close() has left; None when nothing is left."""
        with self._cond:
            if self._deadline is None:
                return self.request_timeout_s
            left = self._deadline - time.monotonic()
        return min(self.request_timeout_s, left) if left > 0.05 else None

    def _sleep(self, seconds: float) -> bool:
        """Wait before a retry; False if close()'s deadline falls before the wait would end."""
        end = time.monotonic() + seconds
        with self._cond:
            while True:
                if self._deadline is not None and end > self._deadline:
                    return False
                left = end - time.monotonic()
                if left <= 0:
                    return True
                self._cond.wait(left)
