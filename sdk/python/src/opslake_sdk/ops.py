"""Op records as ``POST /events`` takes them, built so that the server accepts them.

The limits are the server's (``opslake.models.ops``, ``opslake.ingest.events``); the SDK applies
them before sending, because an op the server rejects is an op lost: ids are cleaned (no
surrounding or inner line breaks, 200 characters), texts cut to their limits with the server's
truncation mark, attributes to 50 with valid keys. Redaction stays the server's job.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import random
import re
import reprlib
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

MAX_OPS_PER_REQUEST = 500
MAX_REQUEST_BYTES = 1024 * 1024
MAX_ID_CHARS = 200
MAX_SUMMARY_CHARS = 2_000
MAX_ERROR_CHARS = 4_000
MAX_ATTRIBUTES = 50
MAX_ATTRIBUTE_KEY_CHARS = 128
MAX_ATTRIBUTE_VALUE_CHARS = 1_000
MAX_RECORD_BYTES = 64 * 1024
MAX_DURATION_MS = 7 * 24 * 3600 * 1000.0
TRUNCATION_MARK = "…[truncated]"
MAX_SUMMARY_ARGS = 50  # arguments printed in a call's summary (the rest counted)
#: Claims only the server makes (``POST /log`` writes event_kind "log", opslake's jobs source "llm",
#: its observed tool calls "gateway" and "mcp"): an op that carried one would be refused, so the SDK
#: never sends them.
RESERVED_EVENT_KINDS = frozenset({"log"})
RESERVED_SOURCES = frozenset({"llm", "gateway", "mcp"})
DEFAULT_SOURCE = "sdk"
#: Room left in a record for what the server adds (reporter_id, defaults, JSON escaping).
RECORD_MARGIN_BYTES = 4 * 1024

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [high + low for high in _CROCKFORD for low in _CROCKFORD]  # every 10-bit value
_SHIFTS = tuple(range(120, -1, -10))
_BAD_KEY_CHARS = re.compile(r"[^A-Za-z0-9_.:\-]")

_SCALARS = (int, float, bool, type(None))


#: The SDK's own random numbers, seeded from the OS (again in each forked child). Not the
#: ``random`` module's: an agent that calls ``random.seed(42)`` for a reproducible run must get
#: the same sequence observed or not, and two such runs must not make the same op ids.
RNG = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=RNG.seed)


def new_op_id() -> str:
    """A ULID (48 bits of milliseconds, 80 random bits): unique, sortable by time, and the same on
    every retry of the op it names, which is what makes a retry idempotent. The bits must not
    collide, not be secret: a seeded :data:`RNG` is enough."""
    return encode_ulid((int(time.time() * 1000) << 80) | RNG.getrandbits(80))


def encode_ulid(value: int) -> str:
    """128 bits as 26 Crockford base32 characters, two at a time (a tool call pays for this)."""
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])


def utc_now() -> str:
    """Now, as the op's ``ts`` (UTC, milliseconds, ``Z``)."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


def iso_ts(value: datetime) -> str:
    """A datetime as ``ts`` (UTC, milliseconds, ``Z``; a naive one is taken as UTC, as the server does)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def well_formed(text: str) -> str:
    """``text`` with lone surrogates as U+FFFD (JSON could carry them, the lake cannot)."""
    if text.isascii():
        return text
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def truncate(text: str, limit: int) -> str:
    """At most ``limit`` characters, ending with the server's truncation mark when cut."""
    if len(text) <= limit:
        return text
    return text[: limit - len(TRUNCATION_MARK)] + TRUNCATION_MARK


def clean_text(value: Any, limit: int) -> str | None:
    """A free text field: a string, well formed, cut to ``limit``; None stays None."""
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return truncate(well_formed(text[: limit * 2]), limit)


def clean_key(value: Any) -> str | None:
    """An identifying id (``op_id``, ``session_id``, ``trace_id``) as the server accepts it. A
    longer one is not cut (two ids sharing their first 200 characters would become one, and the
    lake keeps one op per op id) but shortened to a prefix and a digest of the whole: the same
    id always gives the same result, so retries stay idempotent."""
    if value is None:
        return None
    text = " ".join(well_formed(str(value)[:100_000]).split())
    if len(text) <= MAX_ID_CHARS:
        return text or None
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    return f"{text[: MAX_ID_CHARS - 33].rstrip()}~{digest}"


def clean_id(value: Any) -> str | None:
    """An id or label the server's rule accepts (1-200 characters, no surrounding whitespace):
    inner whitespace runs (line breaks included) become one space; empty is None."""
    if value is None:
        return None
    text = " ".join(well_formed(str(value)[: MAX_ID_CHARS * 4]).split())[:MAX_ID_CHARS].rstrip()
    return text or None


class _BoundedRepr(reprlib.Repr):
    """reprlib, plus the types it would print whole before cutting: bytes (a 1 GB blob must
    not become a 4 GB string on the tool call's thread) and ints too long for ``repr``."""

    def repr_bytes(self, x: bytes, level: int) -> str:
        return self._bytes(x)

    def repr_bytearray(self, x: bytearray, level: int) -> str:
        return f"bytearray({self._bytes(x)})"

    def repr_memoryview(self, x: memoryview, level: int) -> str:
        return f"<memoryview of {x.nbytes} bytes>"

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 1_000:  # ~300 digits: repr() of a very long int is slow, or refused
            return f"<int of {x.bit_length()} bits>"
        return super().repr_int(x, level)

    def _bytes(self, x: bytes | bytearray) -> str:
        if len(x) <= self.maxstring:
            return repr(bytes(x))
        return repr(bytes(x[: self.maxstring]))[:-1] + f"…' ({len(x)} bytes)"


_repr = _BoundedRepr()
_repr.maxstring = 300
_repr.maxother = 300
_repr.maxlong = 100
_repr.maxlist = _repr.maxtuple = _repr.maxset = _repr.maxfrozenset = _repr.maxdeque = 20
_repr.maxdict = 20
_repr.maxlevel = 4


def safe_repr(value: Any) -> str:
    """A bounded ``repr`` (long containers, strings and bytes elided); one that raises gives a
    placeholder, never an error."""
    kind = type(value)
    try:
        if kind is str:  # the common cases, without reprlib's machinery
            return repr(value) if len(value) <= _repr.maxstring else _repr.repr(value)
        if kind in _SCALARS and (kind is not int or value.bit_length() <= 1_000):
            return repr(value)[: _repr.maxlong]
        return _repr.repr(value)
    except Exception:  # a broken __repr__ must not cost the op (nor the agent's call)
        return f"<{type(value).__name__} object>"


def bounded_repr(value: Any, limit: int = MAX_SUMMARY_CHARS) -> str:
    """A summary of ``value``: a string as it is, anything else as :func:`safe_repr`; cut to
    ``limit``."""
    text = value if isinstance(value, str) else safe_repr(value)
    return truncate(well_formed(text[: limit * 2]), limit)


def summarize_call(args: tuple[Any, ...], kwargs: Mapping[str, Any], limit: int = MAX_SUMMARY_CHARS) -> str:
    """A call's arguments as ``(a, 'b', key=value)``, each bounded, the whole cut to ``limit``;
    at most :data:`MAX_SUMMARY_ARGS` of them are printed (``f(*rows)`` with a million rows must
    not cost a million reprs)."""
    if len(args) + len(kwargs) <= MAX_SUMMARY_ARGS:
        parts = [safe_repr(arg) for arg in args]
        parts += [f"{key}={safe_repr(value)}" for key, value in kwargs.items()]
    else:
        parts = [safe_repr(arg) for arg in args[:MAX_SUMMARY_ARGS]]
        parts += [
            f"{key}={safe_repr(value)}"
            for key, value in itertools.islice(kwargs.items(), max(0, MAX_SUMMARY_ARGS - len(parts)))
        ]
        parts.append(f"… {len(args) + len(kwargs) - len(parts)} more")
    return truncate(well_formed("(" + ", ".join(parts) + ")"), limit)


def clean_attributes(attributes: Mapping[Any, Any] | None) -> dict[str, str | int | float | bool]:
    """At most 50 attributes with keys the server accepts (other characters become ``_``) and
    string, number or boolean values (anything else as bounded text; NaN and infinities as text)."""
    out: dict[str, str | int | float | bool] = {}
    for raw_key, raw in (attributes or {}).items():
        if len(out) == MAX_ATTRIBUTES:
            break
        key = _BAD_KEY_CHARS.sub("_", str(raw_key))[:MAX_ATTRIBUTE_KEY_CHARS]
        if not key or raw is None:
            continue
        value: str | int | float | bool
        if (
            isinstance(raw, bool)
            or (isinstance(raw, int) and -(2**63) <= raw < 2**63)  # a longer one as (bounded) text
            or (isinstance(raw, float) and math.isfinite(raw))
        ):
            value = raw
        else:
            value = bounded_repr(raw, MAX_ATTRIBUTE_VALUE_CHARS)
            if not value:
                continue
        out[key] = value
    return out


def op_size(op: Mapping[str, Any]) -> int:
    """About what an op holds in memory, in characters (the buffer's size bound): cheap, not
    exact. Ids and labels are bounded (200 characters each) and counted flat; the summaries, the
    error and the attributes are what can make an op large."""
    size = 512
    for name in ("input_summary", "output_summary", "error"):
        text = op.get(name)
        if text:
            size += len(text)
    attributes = op.get("attributes")
    if attributes:
        size += sum(len(k) + (len(v) if type(v) is str else 8) + 32 for k, v in attributes.items())
    return size


def clean_source(value: Any) -> str | None:
    """``source`` as the server accepts it: a reserved one ("llm", "gateway", "mcp") becomes ``sdk``."""
    text = clean_id(value)
    return DEFAULT_SOURCE if text and text.lower() in RESERVED_SOURCES else text


def clean_event_kind(value: Any) -> str | None:
    """``event_kind`` as the server accepts it: a reserved one ("log") is left out."""
    text = clean_id(value)
    return None if text and text.lower() in RESERVED_EVENT_KINDS else text


def encode(op: Mapping[str, Any]) -> bytes:
    """An op as compact UTF-8 JSON (what one element of ``{"ops": [...]}`` costs in bytes)."""
    return json.dumps(op, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def fit_record(op: dict[str, Any]) -> bytes:
    """The encoded op, shrunk when it would pass the server's 64 KiB record limit (only possible
    with many long multi-byte attributes): attributes go first, then the summaries shorten."""
    body = encode(op)
    if len(body) <= MAX_RECORD_BYTES - RECORD_MARGIN_BYTES:
        return body
    if op.get("attributes"):
        op["attributes"] = {"opslake_sdk.attributes_dropped": len(op["attributes"])}
    for name in ("input_summary", "output_summary", "error"):
        if isinstance(op.get(name), str):
            op[name] = truncate(op[name], 500)
    return encode(op)


def build_op(
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
    source: str | None = None,
    event_kind: str | None = None,
    error: Any = None,
    error_type: Any = None,
    input_summary: Any = None,
    output_summary: Any = None,
    attributes: Mapping[Any, Any] | None = None,
) -> dict[str, Any]:
    """One op record for ``POST /events``, cleaned to its limits; fields that are None are left
    out (the server fills its defaults)."""
    duration = float(duration_ms) if math.isfinite(duration_ms) else 0.0
    op: dict[str, Any] = {
        "op_id": clean_key(op_id) or new_op_id(),
        "ts": iso_ts(ts) if isinstance(ts, datetime) else (ts or utc_now()),
        "endpoint": clean_id(endpoint) or "unknown",
        "success": bool(success),
        "duration_ms": round(min(max(duration, 0.0), MAX_DURATION_MS), 3),
        "agent_id": clean_id(agent_id),
        "session_id": clean_key(session_id),
        "task_class": clean_id(task_class),
        "trace_id": clean_key(trace_id),
        "source": clean_source(source),
        "event_kind": clean_event_kind(event_kind),
        "error": clean_text(error, MAX_ERROR_CHARS),
        "error_type": clean_id(error_type),
        "input_summary": clean_text(input_summary, MAX_SUMMARY_CHARS),
        "output_summary": clean_text(output_summary, MAX_SUMMARY_CHARS),
        "attributes": clean_attributes(attributes) or None,
    }
    return {name: value for name, value in op.items() if value is not None}
