"""One ``POST /events`` of one batch, and what its answer means for the ops in it."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from opslake_sdk.bounded import AnswerTooLarge, read_bounded
from opslake_sdk.retry import is_retryable, parse_retry_after

log = logging.getLogger("opslake_sdk")

Kind = Literal["delivered", "refused", "retry", "split"]


@dataclass(frozen=True)
class Outcome:
    """``delivered``: a 2xx (``accepted``/``rejected``/``redacted`` counted from its body);
    ``refused``: a 4xx that would fail again (every op rejected); ``retry``: resend the same
    batch after ``retry_after_s`` (from the answer) or a backoff; ``split``: a 413 for a batch
    of more than one op (send its ops again in smaller requests)."""

    kind: Kind
    ops: int
    accepted: int = 0
    rejected: int = 0
    redacted: int = 0
    retry_after_s: float | None = None
    reason: str = ""


def batch_body(encoded_ops: list[bytes]) -> bytes:
    """``{"ops": [...]}`` from already encoded ops."""
    return b'{"ops":[' + b",".join(encoded_ops) + b"]}"


def _delivered(status: int, content: bytes, ops: int) -> Outcome:
    """A 2xx: the server says which ops it accepted and which it rejected (with reasons). A 2xx
    without that answer is not opslake's (a wrong ``OPSLAKE_URL`` that serves a page for every
    path, a captive portal): counting it as accepted would lose every op without a word, so it is
    retried with the same op ids (harmless if it was opslake after all) and, in the end, failed."""
    try:
        body: Any = json.loads(content)
        rejected_list = body.get("rejected") or []
        rejected = min(len(rejected_list), ops)
        redacted = len(body.get("redacted_ids") or [])
        if not isinstance(body.get("accepted"), list):
            raise ValueError("no accepted list")
    except (ValueError, AttributeError, TypeError, RecursionError):
        return Outcome(
            "retry",
            ops,
            reason=f"{status} without an /events answer (is OPSLAKE_URL the API's base URL?): "
            f"{content[:120].decode('utf-8', 'replace')!r}",
        )
    if rejected_list:
        first = rejected_list[0] if isinstance(rejected_list[0], dict) else {}
        log.warning(
            "opslake rejected %d of %d ops (first: %s)", rejected, ops, str(first.get("message", ""))[:300]
        )
    return Outcome("delivered", ops, accepted=ops - rejected, rejected=rejected, redacted=redacted)


def _reason(status: int, content: bytes) -> str:
    try:
        message = json.loads(content).get("message")
    except (ValueError, AttributeError, RecursionError):
        message = None
    return f"{status} {message or content[:200].decode('utf-8', 'replace')}"


def post_batch(client: httpx.Client, body: bytes, ops: int, *, timeout: float) -> Outcome:
    """Send one batch once, the whole answer within ``timeout`` (see :mod:`bounded`). Never
    raises: network errors, 429/5xx and answers that are not opslake's become ``retry``."""
    deadline = time.monotonic() + timeout
    try:
        with client.stream(
            "POST", "/events", content=body, headers={"content-type": "application/json"}, timeout=timeout
        ) as answer:
            status, retry_after = answer.status_code, answer.headers.get("retry-after")
            content = read_bounded(answer, deadline=deadline)
    except (httpx.HTTPError, AnswerTooLarge) as exc:  # connection refused, timeouts, protocol errors
        return Outcome("retry", ops, reason=f"{type(exc).__name__}: {exc}")
    if 200 <= status < 300:
        return _delivered(status, content, ops)
    if is_retryable(status):
        return Outcome(
            "retry", ops, retry_after_s=parse_retry_after(retry_after), reason=_reason(status, content)
        )
    if status == 413 and ops > 1:  # a proxy's limit below ours, or the server's: halve
        return Outcome("split", ops, reason=_reason(status, content))
    return Outcome("refused", ops, rejected=ops, reason=_reason(status, content))
