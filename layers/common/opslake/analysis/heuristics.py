"""The heuristic diagnoser: a category, a cause and specific advice from keywords alone.

Used when no model is configured, when the model's budget is spent, or when its answer fails
validation. It recognises the texts of this repo's tools (``COLUMN_NOT_FOUND: … cannot be
resolved``, ``no worker with id …``, ``missing required filter(s): …``) and common runtime texts
(``ReadTimeout``, ``429 Too Many Requests``, ``AccessDenied``, ``OutOfMemory`` …).

Names quoted in the advice (columns, tables, ids, fields) come from agent-supplied error text:
only plain identifiers are kept, cut to a few dozen characters, and none that is a network location
or reads as an instruction; anything else is left out. Error text quoted in a cause or advice
passes the lesson fence (:mod:`opslake.analysis.fence`) or is left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from opslake.analysis.fence import (
    identifier_refusal,
    instruction_refusal,
    lesson_refusal,
    mask_locations,
    network_refusal,
)
from opslake.models.analysis import (
    MAX_ADJUSTMENT_CHARS,
    MAX_CAUSE_CHARS,
    Category,
    DiagnosisAnswer,
    FailureSample,
    Signature,
)

MAX_NAME_CHARS = 40
MAX_NAMES = 3
MAX_SNIPPET_CHARS = 120
MAX_SAMPLES_READ = 20

# error_type → (category, confidence): the stable codes of this repo's tools and HTTP fallbacks.
_ERROR_TYPES: dict[str, tuple[Category, float]] = {
    "sql_column_not_found": ("unknown_column", 0.8),
    "sql_table_not_found": ("unknown_table", 0.8),
    "sql_table_not_allowed": ("unknown_table", 0.8),
    "sql_function_not_found": ("not_found", 0.7),
    "sql_timeout": ("timeout", 0.8),
    "sql_throttled": ("rate_limit", 0.8),
    "sql_too_expensive": ("resource_exhausted", 0.8),
    "sql_scan_limit_exceeded": ("resource_exhausted", 0.8),
    "payload_too_large": ("resource_exhausted", 0.75),
    "http_413": ("resource_exhausted", 0.7),
    "http_429": ("rate_limit", 0.8),
    "http_401": ("auth", 0.8),
    "http_403": ("auth", 0.8),
    "forbidden": ("auth", 0.8),
    "http_404": ("not_found", 0.7),
    "http_408": ("timeout", 0.7),
    "http_504": ("timeout", 0.7),
    "sql_syntax_error": ("validation", 0.75),
    "sql_type_mismatch": ("validation", 0.75),
    "sql_invalid_argument": ("validation", 0.7),
    "sql_invalid_query": ("validation", 0.7),
    "sql_not_supported": ("validation", 0.7),
    "sql_rejected": ("validation", 0.7),
    "invalid_ops": ("validation", 0.7),
    "malformed_json": ("validation", 0.8),
}
# error_type → (category, confidence) when no keyword decides: generic codes.
_GENERIC_ERROR_TYPES: dict[str, tuple[Category, float]] = {
    "bad_request": ("validation", 0.5),
    "not_found": ("not_found", 0.6),
    "query_unavailable": ("timeout", 0.5),
    "service_unavailable": ("timeout", 0.5),
    "sql_unavailable": ("timeout", 0.5),
}
#: The error codes the diagnoser knows: validated parts an entry may name.
ERROR_CODES = frozenset({*_ERROR_TYPES, *_GENERIC_ERROR_TYPES})
_I = re.IGNORECASE
_TIMEOUT = re.compile(
    r"timed? ?out|timeout|deadline exceeded|did not finish within|exhausted its time limit"
    r"|Gateway Time-?out|\b(?:HTTP|status)[\s:]*504\b",
    _I,
)
# (category, confidence, pattern): first match wins, strong (specific) texts before weak ones.
_KEYWORDS: tuple[tuple[Category, float, re.Pattern[str]], ...] = (
    (
        "unknown_column",
        0.8,
        re.compile(
            r"COLUMN_NOT_FOUND|cannot be resolved|Referenced column|no such column|unknown column"
            r"|column \S+ (?:does not exist|not found)|invalid column name",
            _I,
        ),
    ),
    (
        "unknown_table",
        0.75,
        re.compile(
            r"TABLE_NOT_FOUND|\btable \S+ does not exist|no such table|unknown table|relation \S+ does not exist"
            r"|\bno table '|\btable \S+ is not allowed|EntityNotFoundException",
            _I,
        ),
    ),
    (
        "rate_limit",
        0.8,
        re.compile(
            r"\b429\b|too many requests|throttl|rate[ _-]?limit|rate exceeded|\bslow ?down\b"
            r"|TooManyRequestsException|RequestLimitExceeded",
            _I,
        ),
    ),
    ("timeout", 0.75, _TIMEOUT),
    (
        "auth",
        0.75,
        re.compile(
            r"access ?denied|unauthori[sz]ed|forbidden|not authori[sz]ed|permission denied|PERMISSION_DENIED"
            r"|invalid (?:api )?key|InvalidClientTokenId|UnrecognizedClient|ExpiredToken|token (?:has )?expired"
            r"|SignatureDoesNotMatch|\b(?:HTTP|status(?: code)?|error code)[\s:]*40[13]\b",
            _I,
        ),
    ),
    (
        "resource_exhausted",
        0.75,
        re.compile(
            r"out ?of ?memory|MemoryError|\bOOM\b|MEMORY_LIMIT|row cap|payload too large|\b413\b"
            r"|context length|maximum context|too many tokens|is too long|no space left|disk full|RESOURCE_EXHAUSTED"
            r"|resource exhausted|Bytes scanned limit",
            _I,
        ),
    ),
    (
        "not_found",
        0.7,
        re.compile(
            r"NOT_FOUND|not found|does not exist|\bno such\b|NoSuchKey|NoSuchBucket|ResourceNotFound"
            r"|\b404\b|\bno \w+ with (?:id|name)\b|has no ops|not registered",
            _I,
        ),
    ),
    (
        "validation",
        0.7,
        re.compile(
            r"validation|\brequired\b|\bmissing\b|must be|should be|malformed|SYNTAX_ERROR|syntax error"
            r"|mismatched input|extraneous input|JSONDecodeError|invalid request|bad request",
            _I,
        ),
    ),
    ("resource_exhausted", 0.6, re.compile(r"exceed|truncated|too (?:large|long|big)|\blimit\b", _I)),
    ("validation", 0.6, re.compile(r"invalid|expected|expecting|not allowed|not supported|unsupported", _I)),
    (
        "timeout",
        0.5,
        re.compile(r"unavailable|\b50[23]\b|connection (?:refused|reset|aborted)|temporarily", _I),
    ),
)
_OTHER_CONFIDENCE = 0.3

# Name extraction from raw errors (agent-supplied text: see clean_name).
COLUMN_NAMES = (
    re.compile(r"Column '([^']{1,200})' cannot be resolved"),
    re.compile(r"Referenced column \"([^\"]{1,200})\""),
    re.compile(r"column \"?([\w.$]{1,200})\"? (?:does not exist|not found)", _I),
    re.compile(r"(?:Unknown|invalid) column (?:name )?'([^']{1,200})'", _I),
    re.compile(r"no such column: ([\w.$]{1,200})", _I),
)
_TABLE_NAMES = (
    re.compile(r"Table '([^']{1,200})' does not exist"),
    re.compile(r"\bno table '([^']{1,200})'"),
    re.compile(r"\btable '([^']{1,200})' is not allowed"),
    re.compile(r"no such table: ([\w.$]{1,200})", _I),
    re.compile(r"relation \"([^\"]{1,200})\" does not exist", _I),
)
_AVAILABLE_TABLES = re.compile(r"(?:available tables|tables is allowed): ([\w, ]{1,400})")
_MISSING_ID = re.compile(r"\bno (\w{1,30}) with (?:id|name) '([^']{1,200})'")
_NOT_FOUND_ID = re.compile(
    r"\b(\w{1,30}) (?:'([^']{1,200})'|([\w.\-:]{0,100}\d[\w.\-:]{0,100})) (?:not found|does not exist|has no ops)"
)
_FILE_WORDS = re.compile(r"No such file|FileNotFound|NoSuchKey|specified key", _I)
_FUNCTION = re.compile(r"Function '([^']{1,200})' not registered")
_MISSING_FIELDS = re.compile(
    r"missing required (?:filter|field|parameter|argument)\(?s?\)?: ([\w ,.]{1,200})"
)
_REQUIRED_FIELD = re.compile(r"(?:^|[;:] )([\w.]{1,60}): Field required")
_DURATION = re.compile(r"(?:within|after|timeout=|limit of) ?(\d{1,7}(?:\.\d+)?) ?(ms|s|seconds)?\b")
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_.$:\-]+$")
_CONTEXT_WORDS = re.compile(r"context length|maximum context|too many tokens|too long|\btokens?\b", _I)
_SQL_ENDPOINT = re.compile(r"sql|query|athena", _I)
_UNSAFE = re.compile(r"[\x00-\x1f\x7f`\\]+|<{2,}|>{2,}")


def clean_name(raw: str, limit: int = MAX_NAME_CHARS) -> str | None:
    """A plain identifier from agent text (letters, digits, ``_.$:-``), cut to ``limit``; else None."""
    name = raw.strip()
    if not name or not _PLAIN_NAME.match(name):
        return None
    if re.search(r":\d", name) or network_refusal(name, strict=False) or instruction_refusal(name):
        return None  # host:port, an IP, or words written to the reader: not a name
    # the label check reads camelCase and leetspeak as words ("PasteYourXApiKeyIntoLogContext")
    if identifier_refusal(name):
        return None
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _fit(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _names(
    errors: Iterable[str], patterns: Iterable[re.Pattern[str]], *, last_part: bool = False
) -> list[str]:
    """Distinct clean names the patterns capture in the errors (at most MAX_NAMES)."""
    found: list[str] = []
    for error in errors:
        for pattern in patterns:
            for match in pattern.finditer(error):
                raw = match.group(1)
                name = clean_name(raw.rsplit(".", 1)[-1] if last_part else raw)
                if name and name not in found:
                    found.append(name)
                    if len(found) >= MAX_NAMES:
                        return found
    return found


def _quoted(names: list[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _named(label: str, names: list[str], singular: str, plural: str) -> str:
    """``Column 'a' does not exist`` / ``Columns 'a', 'b' do not exist`` / ``The column does not exist``."""
    if not names:
        return f"The {label.lower()} named {singular}"
    if len(names) == 1:
        return f"{label} {_quoted(names)} {singular}"
    return f"{label}s {_quoted(names)} {plural}"


def _snippet(sig: Signature, *, advice: bool = False) -> str:
    """The normalized error of the template (ids and literals are masked there), made inert.

    For advice (which reaches other agents) only the texts of opslake's own routes are quoted; a
    tool's or runtime's error text is the reporting agent's own words and stays out.
    """
    if advice and not sig.endpoint.startswith("/"):
        return "see the error"
    text = sig.template.split(" | ", 2)[-1] if sig.template.count(" | ") >= 2 else (sig.error_type or "")
    text = _fit(_UNSAFE.sub(" ", text).strip(), MAX_SNIPPET_CHARS)
    if advice:  # reaches other agents: the lesson fence, as the text is
        return text if text and lesson_refusal(text) is None else "see the error"
    if instruction_refusal(text):
        return "an error written to its reader (withheld)"
    return mask_locations(text) or "an error"


def _endpoint(sig: Signature) -> str:
    return _fit(re.sub(r"[^\w/{}:.\-]", "", sig.endpoint), 60) or "the endpoint"


def classify(error_type: str | None, texts: Iterable[str]) -> tuple[Category, float]:
    """(category, confidence) of a failure from its error type, else from keywords in its texts."""
    if error_type and error_type in _ERROR_TYPES:
        return _ERROR_TYPES[error_type]
    text = "\n".join(texts)
    for category, confidence, pattern in _KEYWORDS:
        if pattern.search(text):
            return category, confidence
    if error_type and error_type in _GENERIC_ERROR_TYPES:
        return _GENERIC_ERROR_TYPES[error_type]
    return "other", _OTHER_CONFIDENCE


def diagnose_heuristically(
    sig: Signature, samples: list[FailureSample], sources: Sequence[str] = ()
) -> DiagnosisAnswer:
    """A diagnosis of ``sig`` from its template, its error type and its samples' raw errors.
    ``sources``: the tools the catalog saw called before this one in sessions where it failed
    less (where ids come from), named in the advice for ids that were not found."""
    errors = [s.error for s in samples[:MAX_SAMPLES_READ] if s.error]
    category, confidence = classify(sig.error_type, [sig.error_type or "", sig.template, *errors])
    if category == "not_found" and sig.endpoint.startswith("/tables"):
        category = "unknown_table"
    ep = _endpoint(sig)
    if category == "not_found":
        cause, advice, avoid = _not_found(sig, ep, errors, sources)
    else:
        cause, advice, avoid = _ADVICE[category](sig, ep, errors)
    return DiagnosisAnswer(
        cause=_fit(cause, MAX_CAUSE_CHARS),
        agent_adjustment=_fit(advice, MAX_ADJUSTMENT_CHARS),
        avoid=avoid,
        category=category,
        confidence=confidence,
    )


def _unknown_column(sig: Signature, ep: str, errors: list[str]) -> tuple[str, str, bool]:
    what = _named("Column", _names(errors, COLUMN_NAMES), "does not exist", "do not exist")
    if _SQL_ENDPOINT.search(ep):
        fix = "call GET /tables/{name} and use the listed columns before writing SQL"
    else:
        fix = "read the table's schema first and use only the columns it lists"
    cause = f"Queries on {ep} name columns the tables do not have, so the engine refuses them. {what}."
    return cause, f"{what}: {fix}", True


def _unknown_table(sig: Signature, ep: str, errors: list[str]) -> tuple[str, str, bool]:
    names = _names(errors, _TABLE_NAMES, last_part=True)
    available: list[str] = []
    for error in errors:
        if match := _AVAILABLE_TABLES.search(error):
            available = [n for n in (clean_name(p) for p in match[1].split(",")) if n][:6]
            break
    if "not allowed" in " ".join(errors) or sig.error_type == "sql_table_not_allowed":
        what = _named("Table", names, "is not allowed", "are not allowed")
    else:
        what = _named("Table", names, "does not exist", "do not exist")
    listed = f" ({', '.join(available)})" if available else ""
    fix = f"call GET /tables and use only the listed tables{listed}"
    cause = f"Calls to {ep} name a table that does not exist or is not allowed. {what}."
    return cause, f"{what}: {fix}", True


def _not_found(
    sig: Signature, ep: str, errors: list[str], sources: Sequence[str] = ()
) -> tuple[str, str, bool]:
    functions = _names(errors, (_FUNCTION,))
    if functions:
        what = _named("Function", functions, "is not available", "are not available")
        cause = f"SQL on {ep} calls functions the engine does not have. {what}."
        return cause, f"{what}: use only functions Athena (Trino) supports, or compute it differently", True
    kind, ids = "", []
    for error in errors:
        match = _MISSING_ID.search(error) or _NOT_FOUND_ID.search(error)
        if match:
            kind = kind or (clean_name(match[1], 30) or "")
            name = clean_name(match[2] or match.group(match.lastindex or 2) or "")
            if name and name not in ids:
                ids.append(name)
        if len(ids) >= MAX_NAMES:
            break
    files = bool(_FILE_WORDS.search(" ".join([sig.template, *errors])))
    named = _named(kind.capitalize(), ids, "does not exist", "do not exist") if kind and ids else None
    # advice reaches every agent: it says what kind of id was guessed, never which one (an id is one
    # instance; the cause, for analysts, quotes them)
    if files:
        what = "The file or object asked for does not exist"
    elif kind and ids:
        what = f"Guessed {kind.lower()} ids do not exist"
    else:
        what = "The resource asked for does not exist"
    if sources:
        noun = f"{kind.lower()} ids" if kind else "ids"
        fix = f"use {noun} returned by {' or '.join(sources[:2])} instead of guessing them"
    elif "/profile" in ep:
        fix = "ask only about agents that GET /stats lists for the window, or widen the window (hours)"
    elif files:
        fix = "read only paths or keys that an earlier step created or listed; do not construct them"
    else:
        fix = (
            "use ids returned by an earlier call (a list or search) instead of guessing or constructing them"
        )
    cause = f"Calls to {ep} ask for something that does not exist; the ids look guessed. {named or what}."
    return cause, f"{what}: {fix}", True


def _timeout(sig: Signature, ep: str, errors: list[str]) -> tuple[str, str, bool]:
    after = ""
    for error in errors:
        if match := _DURATION.search(error):
            after = f" after {match[1]} {match[2] or 's'}"
            break
    text = " ".join([sig.template, *errors])
    if not _TIMEOUT.search(text):
        cause = f"{ep} was unavailable or refused connections ({_snippet(sig)}): a transient failure."
        fix = f"{ep} is transiently unavailable: retry after a backoff (honour Retry-After), at most a few times"
    elif _SQL_ENDPOINT.search(ep):
        cause = f"Queries on {ep} run out of time{after}: they scan or aggregate too much."
        fix = (
            f"Queries on {ep} time out{after}: filter on the dt/hour partitions, aggregate less, "
            "then retry once after a backoff (honour Retry-After)"
        )
    else:
        cause = f"Calls to {ep} time out{after}."
        fix = (
            f"Calls to {ep} time out{after}: retry once after a backoff and make each call smaller "
            "(fewer items, pagination)"
        )
    return cause, fix, False


def _rate_limit(sig: Signature, ep: str, errors: list[str]) -> tuple[str, str, bool]:
    cause = f"{ep} is throttling the callers (429 / throttling): too many requests in a short time."
    fix = (
        f"{ep} is rate limited: back off exponentially with jitter, honour Retry-After, "
        "and make fewer parallel calls"
    )
    return cause, fix, False


def _auth(sig: Signature, ep: str, errors: list[str]) -> tuple[str, str, bool]:
    cause = f"{ep} refuses the caller's credentials or permissions ({_snippet(sig)})."
    fix = (
        f"{ep} denies access (401/403): do not retry the same call; use a resource the agent may "
        "access or ask the operator for access"
    )
    return cause, fix, True


def _resource_exhausted(sig: Signature, ep: str, errors: list[str]) -> tuple[str, str, bool]:
    text = " ".join([sig.template, *errors])
    if _SQL_ENDPOINT.search(ep) and not _CONTEXT_WORDS.search(text):
        cause = (
            f"Queries on {ep} exceed a resource limit (memory, bytes scanned or row cap): they are too broad."
        )
        fix = (
            f"Queries on {ep} are too broad: add WHERE filters (on ops, the dt/hour partitions), select "
            "only the needed columns, aggregate in SQL and add a LIMIT"
        )
    elif _CONTEXT_WORDS.search(text):
        cause = f"Inputs to {ep} are larger than its limit ({_snippet(sig)})."
        fix = f"Inputs to {ep} are too large: shorten or split them (summarize history, send fewer items)"
    else:
        cause = f"Calls to {ep} exceed a resource limit ({_snippet(sig)})."
        fix = f"Calls to {ep} exceed a limit: ask for less per call (filters, pagination, smaller inputs)"
    return cause, fix, True


def missing_field_parts(error: str) -> list[str]:
    """What an error says is missing: the parts of a "missing required …: a, b or c" list (a part
    may hold alternatives, "city or state"), then the names of pydantic's "<name>: Field required"."""
    parts = []
    if match := _MISSING_FIELDS.search(error):
        parts = [p.strip() for p in match[1].split(",")]
    return parts + _REQUIRED_FIELD.findall(error)


def _validation(sig: Signature, ep: str, errors: list[str]) -> tuple[str, str, bool]:
    missing: list[str] = []
    for error in errors:
        for part in missing_field_parts(error):
            names = (clean_name(p.strip()) for p in re.split(r" or |;", part))
            missing.extend(n for n in names if n and n not in missing)
        if missing:
            break
    text = " ".join([sig.template, *errors])
    if missing or re.search(r"\brequired\b|\bmissing\b", text, _I):
        fields = f" ({', '.join(missing[:4])})" if missing else ""
        cause = f"Requests to {ep} leave out required fields{fields}."
        return cause, f"Requests to {ep} miss required fields{fields}: always send them", True
    if re.search(r"SYNTAX_ERROR|syntax error|mismatched input|extraneous input", text, _I):
        cause = f"SQL sent to {ep} does not parse ({_snippet(sig)})."
        fix = (
            f"SQL sent to {ep} has syntax errors: write one Athena (Trino) SELECT, double-quote "
            "identifiers, single-quote strings, and check it before sending"
        )
        return cause, fix, False
    cause = f"Requests to {ep} are rejected as invalid: {_snippet(sig)}."
    fix = f"Requests to {ep} are invalid ({_snippet(sig, advice=True)}): check the input against the endpoint's schema"
    return cause, fix, False


def _other(sig: Signature, ep: str, errors: list[str]) -> tuple[str, str, bool]:
    cause = f"Ops on {ep} fail with: {_snippet(sig)}."
    if re.search(r"retry later|try again later", " ".join([sig.template, *errors]), _I):
        return cause, f"{ep} failed on its side: retry later with a backoff; report it if it persists", False
    fix = (
        f"Calls to {ep} fail ({_snippet(sig, advice=True)}): read the error and change the input; "
        "do not repeat an identical call"
    )
    return cause, fix, False


_ADVICE = {
    "unknown_column": _unknown_column,
    "unknown_table": _unknown_table,
    "not_found": _not_found,
    "timeout": _timeout,
    "rate_limit": _rate_limit,
    "auth": _auth,
    "resource_exhausted": _resource_exhausted,
    "validation": _validation,
    "other": _other,
}
