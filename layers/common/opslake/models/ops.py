"""The op record contract (table ``ops``) and the shape clients may send to ``POST /events``.

Three models, one per trust boundary:

* :class:`OpInput` is what a client sends. It is validated leniently (a missing ``op_id`` or
  ``ts`` gets a default) but never silently: every problem becomes a message.
* :class:`QueuedOp` is what the ingest path puts on the ops queue: redacted, truncated, bounded,
  stamped with the server-side ``reporter_id``. No Python validators, so the writer can
  re-validate 10,000 of them quickly.
* :class:`OpRecord` is a queued op plus ``ingested_at`` (the queue's receive time), i.e. one row
  of the ``ops`` table. Partition columns ``dt``/``hour`` derive from ``ingested_at``.
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from opslake.ingest.redact import (
    IDENTITY_FIELDS,
    LABEL_REDACTED,
    redact,
    redact_attribute,
    redact_identifier,
    redact_label,
)
from opslake.models.ids import new_ulid

# ---- limits (documented in the README; tests assert each one) -------------------------------
MAX_ID_CHARS = 200
MAX_SUMMARY_CHARS = 2_000
MAX_ERROR_CHARS = 4_000
MAX_ATTRIBUTES = 50
MAX_ATTRIBUTE_KEY_CHARS = 128
MAX_ATTRIBUTE_VALUE_CHARS = 1_000
MAX_RECORD_BYTES = 64 * 1024
MAX_FUTURE_SKEW = timedelta(hours=24)
MAX_DURATION_MS = 7 * 24 * 3600 * 1000.0
MAX_WITNESS_CHARS = 1_000  # a reporter witness: an escaped key name, "/" and an agent id
TRUNCATION_MARK = "…[truncated]"
# Text is cut this far past its limit before redaction (bounded work per field): what is kept was
# redacted with its context (a key and its value, a whole token) around the limit.
PRE_REDACTION_MARGIN = 1_024

# Claims only the server makes: ``event_kind`` "log" is written by ``POST /log``, ``source`` "llm" by
# the jobs' own model-call records, "gateway" and "mcp" by the observation of a tool call (REST or
# MCP); a client's op may not claim any of them (a runtime's op is not a call opslake observed).
RESERVED_EVENT_KINDS = frozenset({"log"})
#: The source of opslake's own model-call records (the jobs' and /ask's; see opslake.llm.records).
LLM_SOURCE = "llm"
RESERVED_SOURCES = frozenset({LLM_SOURCE, "gateway", "mcp"})
SERVER_CONTEXT = {"server": True}  # validation context of records the server itself builds
_INVISIBLE = frozenset({"Cc", "Cf"})  # control and format characters (NUL, zero-width space, bidi marks)
# Characters that render as nothing (Unicode's Default_Ignorable_Code_Point outside Cc/Cf:
# variation selectors, the combining grapheme joiner, Hangul fillers, Mongolian selectors) and the
# blank braille pattern, which renders as a space: "gateway\ufe0f" and "\u115fmcp" read as the name.
_IGNORABLE = frozenset(
    {0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFEFF, 0xFFA0}
    | set(range(0x180B, 0x1810))
    | set(range(0x200B, 0x2010))
    | set(range(0x202A, 0x202F))
    | set(range(0x2060, 0x2070))
    | set(range(0xFE00, 0xFE10))
    | set(range(0xE0000, 0xE1000))
)
# Cyrillic and Greek letters drawn like Latin ones (the lowercase of Unicode's confusables that
# spell the reserved labels): "gаteway" with a Cyrillic "а" reads as "gateway".
_CONFUSABLES = str.maketrans(
    {
        "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "і": "i", "ѕ": "s",
        "ј": "j", "ԁ": "d", "ԛ": "q", "ԝ": "w", "һ": "h", "ӏ": "l", "ο": "o", "α": "a", "ε": "e",
        "ι": "i", "κ": "k", "ν": "v", "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "γ": "y",
    }
)  # fmt: skip


def reserved_label_key(value: str) -> str:
    """How a label is compared with the reserved ones: as a reader would see it. NFKC folds the
    full-width "ｇateway" and ligatures into ASCII, control, format and other invisible characters
    ("gateway\x00", "gate\u200bway", "gateway\ufe0f") are dropped, case is folded, Cyrillic and
    Greek look-alikes read as Latin and the ends stripped; the stored value is kept."""
    folded = unicodedata.normalize("NFKC", value)
    visible = "".join(
        ch for ch in folded if ord(ch) not in _IGNORABLE and unicodedata.category(ch) not in _INVISIBLE
    )
    return unicodedata.normalize("NFKC", visible.casefold()).translate(_CONFUSABLES).strip()


# Ids and labels redacted on ingest (a secret inside is replaced by "[REDACTED]", which the id
# rule allows; an id of IDENTITY_FIELDS becomes "redacted-<32 hex>" instead, so that distinct ids
# stay distinct; reporter_id is the server's own).
ID_FIELDS = (
    "op_id", "endpoint", "source", "agent_id", "session_id", "trace_id", "error_type", "sig_hash",
    "event_kind", "task_class",
)  # fmt: skip

# Text fields and their limits: redacted, then truncated (with ``truncated`` set) on ingest.
TEXT_LIMITS: dict[str, int] = {
    "input_summary": MAX_SUMMARY_CHARS,
    "output_summary": MAX_SUMMARY_CHARS,
    "error": MAX_ERROR_CHARS,
    "correction": MAX_ERROR_CHARS,
}

# Identifiers and labels: printable, no whitespace at the ends, at most MAX_ID_CHARS.
Id = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS, pattern=r"^\S(?:.*\S)?$")]
AttributeKey = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_ATTRIBUTE_KEY_CHARS, pattern=r"^[A-Za-z0-9_.:\-]+$")
]
DurationMs = Annotated[float, Field(ge=0, le=MAX_DURATION_MS, allow_inf_nan=False)]
TurnNumber = Annotated[int, Field(ge=0, le=1_000_000)]


def _utc_ms(value: datetime) -> datetime:
    """Normalise to UTC with millisecond precision (naive datetimes are taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    value = value.astimezone(UTC)
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


UtcMs = Annotated[datetime, AfterValidator(_utc_ms)]


def truncate(text: str, limit: int) -> tuple[str, bool]:
    """Cut ``text`` to at most ``limit`` characters, ending with a visible mark when cut."""
    if len(text) <= limit:
        return text, False
    return text[: limit - len(TRUNCATION_MARK)] + TRUNCATION_MARK, True


def redact_truncate(text: str, limit: int) -> tuple[str, bool]:
    """Redact, then cut to ``limit``. Only the first ``limit + PRE_REDACTION_MARGIN`` characters
    are scanned, so the work per field is bounded whatever a client sends."""
    head = text[: limit + PRE_REDACTION_MARGIN]
    cleaned, cut = truncate(redact(head), limit)
    return cleaned, cut or len(head) < len(text)


def redact_id(value: str, *, identity: bool = False) -> str:
    """An id or label with its secret parts replaced; still a valid :data:`Id`. An identifying id
    (``identity``) is replaced whole by a digest of it, never merged with another."""
    cleaned = redact_identifier(value) if identity else redact_label(value)
    if cleaned == value:
        return value
    return cleaned[:MAX_ID_CHARS].rstrip() or LABEL_REDACTED


def redact_attributes(attributes: dict[str, str]) -> tuple[dict[str, str], bool]:
    """Keys and values redacted: a value whole under a secret-named key; a key with a secret in it
    gets ``REDACTED`` in its place (numbered if two keys end up the same)."""
    out: dict[str, str] = {}
    cut = False
    for key, text in attributes.items():
        head = text[: MAX_ATTRIBUTE_VALUE_CHARS + PRE_REDACTION_MARGIN]
        value, was_cut = truncate(redact_attribute(key, head), MAX_ATTRIBUTE_VALUE_CHARS)
        cut = cut or was_cut or len(head) < len(text)
        name = redact_label(key, marker=LABEL_REDACTED)[:MAX_ATTRIBUTE_KEY_CHARS]
        if name != key:
            base, number = name[: MAX_ATTRIBUTE_KEY_CHARS - 4], 2
            while name in out or name in attributes:
                name, number = f"{base}.{number}", number + 1
        out[name] = value
    return out, cut


class _OpCore(BaseModel):
    """Fields shared by what clients send and what is stored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: Id = Field(description="route or tool name, e.g. /sql, tool:query_db, scenario:fill")
    success: StrictBool
    duration_ms: DurationMs
    session_id: Id | None = None
    trace_id: Id | None = None
    error_type: Id | None = None
    sig_hash: Id | None = None
    event_kind: Id | None = None
    task_class: Id | None = None
    applied_at_turn: TurnNumber | None = None
    rescue_attempted: StrictBool | None = None
    rescue_succeeded: StrictBool | None = None


class QueuedOp(_OpCore):
    """An op record as it travels on the queue (everything but ``ingested_at``)."""

    op_id: Id
    ts: UtcMs
    source: Id
    agent_id: Id
    reporter_id: Id
    input_summary: Annotated[str, Field(max_length=MAX_SUMMARY_CHARS)] | None = None
    output_summary: Annotated[str, Field(max_length=MAX_SUMMARY_CHARS)] | None = None
    error: Annotated[str, Field(max_length=MAX_ERROR_CHARS)] | None = None
    correction: Annotated[str, Field(max_length=MAX_ERROR_CHARS)] | None = None
    attributes: Annotated[
        dict[AttributeKey, Annotated[str, Field(max_length=MAX_ATTRIBUTE_VALUE_CHARS)]],
        Field(max_length=MAX_ATTRIBUTES),
    ] = Field(default_factory=dict)
    truncated: bool = False

    def to_message(self) -> str:
        """The queue message body (compact JSON, UTC timestamps)."""
        return self.model_dump_json(exclude_none=True)


class OpRecord(QueuedOp):
    """One row of the ``ops`` table."""

    ingested_at: UtcMs

    @property
    def dt(self) -> str:
        return self.ingested_at.strftime("%Y-%m-%d")

    @property
    def hour(self) -> str:
        return self.ingested_at.strftime("%H")


AttributeValue = str | int | float | bool


class OpRow(BaseModel):
    """An op as a learning job reads it back from ``ops``: the columns every job needs. Each job's
    row adds its own; columns a query selects beyond a row's fields are ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    op_id: Id
    endpoint: Id
    agent_id: Id
    ts: UtcMs


class OpInput(_OpCore):
    """What an agent runtime may report to ``POST /events``.

    ``reporter_id`` and ``ingested_at`` are the server's to set and are refused here, so that a
    client can neither impersonate another reporter nor back-date its records into a partition
    the analyzer has already read.
    """

    op_id: Id | None = Field(default=None, description="idempotency key; a ULID is assigned when missing")
    ts: UtcMs | None = Field(default=None, description="when the op happened (UTC); defaults to receipt time")
    source: Id = "event"
    agent_id: Id | None = Field(
        default=None, description="the agent the op belongs to; defaults to the reporter"
    )
    input_summary: str | None = None
    output_summary: str | None = None
    error: str | None = None
    correction: str | None = None
    attributes: dict[AttributeKey, AttributeValue] = Field(default_factory=dict)

    @classmethod
    def server_record(cls, data: dict[str, Any]) -> OpInput:
        """An op the server itself builds (``POST /log``, the observation middleware): the same
        contract, but the reserved claims (``event_kind`` "log", ``source`` "llm"/"gateway"/"mcp") are allowed."""
        return cls.model_validate(data, context=SERVER_CONTEXT)

    @model_validator(mode="before")
    @classmethod
    def _server_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in ("reporter_id", "ingested_at"):
                if name in data:
                    raise ValueError(f"{name} is set by the server and must not be sent")
        return data

    @field_validator("event_kind")
    @classmethod
    def _reserved_event_kind(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and reserved_label_key(value) in RESERVED_EVENT_KINDS and not _is_server(info):
            raise ValueError(
                f'event_kind "{value}" is reserved for records opslake writes itself (POST /log '
                "writes log records); report a lesson with POST /log or use another event_kind"
            )
        return value

    @field_validator("source")
    @classmethod
    def _reserved_source(cls, value: str, info: ValidationInfo) -> str:
        if reserved_label_key(value) in RESERVED_SOURCES and not _is_server(info):
            raise ValueError(
                f'source "{value}" is reserved for the records opslake writes itself (its model calls, '
                'the tool calls it observes); use another source (e.g. "runtime")'
            )
        return value

    @field_validator("attributes")
    @classmethod
    def _attribute_count(cls, value: dict[str, AttributeValue]) -> dict[str, AttributeValue]:
        if len(value) > MAX_ATTRIBUTES:
            raise ValueError(f"at most {MAX_ATTRIBUTES} attributes are allowed, got {len(value)}")
        return value

    def to_queued(self, *, reporter_id: str, received_at: datetime) -> QueuedOp:
        """Apply defaults, redaction and truncation; enforce the clock-skew and size limits."""
        ts = self.ts or _utc_ms(received_at)
        if ts - received_at > MAX_FUTURE_SKEW:
            hours = (ts - received_at).total_seconds() / 3600
            raise ValueError(f"ts is {hours:.1f} h in the future; it may be at most 24 h ahead of the server")
        cut = False
        texts: dict[str, str | None] = {}
        for name, limit in TEXT_LIMITS.items():
            value = getattr(self, name)
            if value is not None:
                value, was_cut = redact_truncate(value, limit)
                cut = cut or was_cut
            texts[name] = value
        attributes, attributes_cut = redact_attributes(
            {
                key: str(raw).lower() if isinstance(raw, bool) else str(raw)
                for key, raw in self.attributes.items()
            }
        )
        ids = {
            "op_id": self.op_id or new_ulid(int(received_at.timestamp() * 1000)),
            "agent_id": self.agent_id or reporter_id,
            **{name: getattr(self, name) for name in ID_FIELDS if name not in ("op_id", "agent_id")},
        }
        queued = QueuedOp(
            **self.model_dump(exclude={"ts", "attributes", *ID_FIELDS, *TEXT_LIMITS}),
            **texts,
            **{
                name: None if value is None else redact_id(value, identity=name in IDENTITY_FIELDS)
                for name, value in ids.items()
            },
            ts=ts,
            reporter_id=reporter_id,
            attributes=attributes,
            truncated=cut or attributes_cut,
        )
        size = len(queued.to_message().encode())
        if size > MAX_RECORD_BYTES:
            raise ValueError(
                f"the record is {size} bytes once serialized; the limit is {MAX_RECORD_BYTES} "
                "(shorten attributes or summaries)"
            )
        return queued


def _is_server(info: ValidationInfo) -> bool:
    return isinstance(info.context, dict) and bool(info.context.get("server"))


def now_utc() -> datetime:
    return _utc_ms(datetime.now(UTC))
