"""One ``POST /events`` of one batch, and what its answer means for the ops in it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

import httpx

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
    unreadable: bool = False  # a 2xx whose body did not say what happened (counted as accepted)


def batch_body(encoded_ops: list[bytes]) -> bytes:
    """``{"ops": [...]}`` from already encoded ops."""
    return b'{"ops":[' + b",".join(encoded_ops) + b"]}"


def _delivered(answer: httpx.Response, ops: int) -> Outcome:
    """A 2xx: the server says which ops it accepted and which it rejected (with reasons)."""
    try:
        body: Any = answer.json()
        rejected_list = body.get("rejected") or []
        rejected = min(len(rejected_list), ops)
        redacted = len(body.get("redacted_ids") or [])
        if not isinstance(body.get("accepted"), list):
            raise ValueError("no accepted list")
    except (ValueError, AttributeError, TypeError):
        # 2xx is the contract's word that the batch is persisted; a body that cannot be read
        # (a proxy's page) does not undo that.
        return Outcome("delivered", ops, accepted=ops, unreadable=True, reason=f"{answer.status_code}")
    if rejected_list:
        first = rejected_list[0] if isinstance(rejected_list[0], dict) else {}
        log.warning(
            "opslake rejected %d of %d ops (first: %s)", rejected, ops, str(first.get("message", ""))[:300]
        )
    return Outcome("delivered", ops, accepted=ops - rejected, rejected=rejected, redacted=redacted)


def _reason(answer: httpx.Response) -> str:
    try:
        message = answer.json().get("message")
    except (ValueError, AttributeError):
        message = None
    return f"{answer.status_code} {message or answer.text[:200]}"


def post_batch(client: httpx.Client, body: bytes, ops: int, *, timeout: float) -> Outcome:
    """Send one batch once. Never raises: network errors and 429/5xx become ``retry``."""
    try:
        answer = client.post(
            "/events", content=body, headers={"content-type": "application/json"}, timeout=timeout
        )
    except httpx.HTTPError as exc:  # connection refused, timeouts, protocol errors
        return Outcome("retry", ops, reason=f"{type(exc).__name__}: {exc}")
    if 200 <= answer.status_code < 300:
        return _delivered(answer, ops)
    if is_retryable(answer.status_code):
        return Outcome(
            "retry",
            ops,
            retry_after_s=parse_retry_after(answer.headers.get("retry-after")),
            reason=_reason(answer),
        )
    if answer.status_code == 413 and ops > 1:  # a proxy's limit below ours, or the server's: halve
        return Outcome("split", ops, reason=_reason(answer))
    return Outcome("refused", ops, rejected=ops, reason=_reason(answer))
