"""Failure signatures: one template per problem, whatever ids, numbers and names it carries.

An error message is *normalized* by masking its variable parts (UUIDs, timestamps, numbers,
quoted names, paths, ids …) with placeholders, so that ``Column 'salry' cannot be resolved`` and
``Column 'ratng' cannot be resolved`` give one template. The template of a failure is its
endpoint, its error type and its normalized error; the signature id is a hash of the template.

Pure logic (no I/O): the analyzer reads failures, passes them here, and stores what comes back.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Set
from datetime import datetime
from typing import Any, Literal

from opslake.analysis.reporters import ReporterTrust, admits
from opslake.models.analysis import (
    MAX_SAMPLE_OP_IDS,
    MAX_TRACKED_AGENTS,
    FailureRow,
    FailureSample,
    Signature,
)

MAX_NORMALIZED_CHARS = 300  # of a normalized error (the template adds endpoint and error type)
MAX_SCANNED_CHARS = 2_000  # of the raw text: bounds the work per message
MAX_VARIANTS = 50  # distinct input variants kept per signature
SIGNATURE_PREFIX = "sig_"
#: An op's identity: (``reporter_id``, ``op_id``), as the lake deduplicates (opslake.lake.opkey).
OpKey = tuple[str | None, str]
VARIANT_CHARS = 12

Reason = Literal["new", "grown", "new_variants"]

_HEX = "0-9a-fA-F"
_HEX_LETTER = re.compile("[a-fA-F]")
_DIGIT = re.compile(r"\d")


def _hex(match: re.Match[str]) -> str:
    """A long hex token is a hash or an id only if it mixes letters and digits."""
    token = match.group()
    if token[:2] in ("0x", "0X"):
        return "<hex>"
    if not _DIGIT.search(token):
        return token  # a word such as "deadbeef"
    return "<hex>" if _HEX_LETTER.search(token) else "<num>"


Replacement = str | Callable[[re.Match[str]], str]
Trigger = str | re.Pattern[str] | None
# (trigger, needs a digit, pattern, replacement), applied in this order, each only when the text
# holds its trigger (a substring, or a match of a pattern) and a digit if it needs one: cheap checks
# that skip most of the substitutions. Whole tokens first (URLs, e-mails, ARNs, quoted
# literals, paths) so their insides are not masked piecemeal; then shapes that contain digits
# (UUIDs, timestamps, dates, times, IPs, hex, ULIDs) before the generic ids and numbers.
_RULES: tuple[tuple[Trigger, bool, re.Pattern[str], Replacement], ...] = (
    ("://", False, re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s'\"`<>]+"), "<url>"),
    ("@", False, re.compile(r"\b[\w.+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+\b"), "<email>"),
    ("arn:", False, re.compile(r"\barn:aws[\w\-]*:[^\s'\"`,;)\]]+"), "<arn>"),
    (
        re.compile("['\"`]"),
        False,
        re.compile(
            r"(?<![\w'\\])'[^'\n]{0,200}'(?!\w)"
            r"|(?<![\w\"\\])\"(?:[^\"\\\n]|\\.){0,200}\"(?!\w)"
            r"|`[^`\n]{0,200}`"
        ),
        "<str>",
    ),
    (
        re.compile(r"[/\\]"),
        False,
        re.compile(
            r"(?<![\w<>/:.\-])(?:~|\.{1,2})?(?:/[\w.\-@+]+){2,}/?"  # /var/task/app.py, ~/x/y
            r"|\b[A-Za-z]:\\[^\s'\"`]+"  # C:\Users\x
            r"|(?<![\w.\-])[\w.\-]+(?:/[\w.\-]+)+\.[A-Za-z]\w{0,4}\b"  # reports/x/file_3.csv
        ),
        "<path>",
    ),
    (
        "-",
        True,
        re.compile(rf"\b[{_HEX}]{{8}}-[{_HEX}]{{4}}-[{_HEX}]{{4}}-[{_HEX}]{{4}}-[{_HEX}]{{12}}\b"),
        "<uuid>",
    ),
    (
        "-",
        True,
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:\s?Z|\s?[+-]\d{2}:?\d{2}|\s?UTC)?(?!\w)"
        ),
        "<ts>",
    ),
    (re.compile("[-/]"), True, re.compile(r"\b\d{4}[-/]\d{2}[-/]\d{2}\b"), "<date>"),
    (":", True, re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b"), "<time>"),
    (".", True, re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b"), "<ip>"),
    (None, True, re.compile(rf"\b0[xX][{_HEX}]+\b|(?<![\w\-])[{_HEX}]{{8,}}(?![\w\-])"), _hex),
    (None, True, re.compile(r"\b[0-7][0-9A-HJKMNP-TV-Z]{25}\b"), "<ulid>"),
    (
        None,
        True,
        re.compile(
            r"(?<![\w.])\d+(?:\.\d+)?"
            r"(?:ms|us|µs|ns|s|sec|secs|m|min|mins|h|hr|hrs|d|b|kb|mb|gb|tb|kib|mib|gib|k|x|%)(?![\w%])",
            re.IGNORECASE,
        ),
        "<num>",
    ),
    # a token of letters, digits, _ and - holding both a digit and a letter: W-00123, worker_12, i-0ab3
    (
        None,
        True,
        re.compile(r"(?<![\w\-<])[A-Za-z_][\w\-]*?\d[\w\-]*|(?<![\w\-<])\d[\d\-]*[A-Za-z_][\w\-]*"),
        "<id>",
    ),
    (
        None,
        True,
        re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?!\w)"),
        "<num>",
    ),
    (None, True, re.compile(r"\d+"), "<num>"),  # digits glued to punctuation the rules above leave alone
)
_RUNS = re.compile(r"(<([a-z]+)>)(?:\s*,\s*<\2>)+")  # [<num>, <num>, <num>] -> [<num>, ...]
_SPACE = re.compile(r"\s+")
_PARTIAL_PLACEHOLDER = re.compile(r"<[a-z]*$")
_ENDPOINT_SEGMENT = re.compile(
    rf"^(?:\d+|[{_HEX}]{{8}}-[{_HEX}]{{4}}-[{_HEX}]{{4}}-[{_HEX}]{{4}}-[{_HEX}]{{12}}|(?=.*\d)[\w\-.]{{4,}})$"
)
_CACHE_LIMIT = 100_000


def normalize(text: str, *, limit: int = MAX_NORMALIZED_CHARS) -> str:
    """``text`` with its variable parts masked, whitespace collapsed, at most ``limit`` characters."""
    text = text[:MAX_SCANNED_CHARS]
    has_digit: bool | None = None
    for trigger, needs_digit, pattern, replacement in _RULES:
        if needs_digit:
            if has_digit is None:
                has_digit = _DIGIT.search(text) is not None
            if not has_digit:
                break  # the remaining rules all need a digit
        if trigger is not None and (
            trigger not in text if isinstance(trigger, str) else trigger.search(text) is None
        ):
            continue
        text = pattern.sub(replacement, text)
    text = _SPACE.sub(" ", _RUNS.sub(r"\1, ...", text)).strip()
    if len(text) > limit:
        text = _PARTIAL_PLACEHOLDER.sub("", text[: limit - 2]).rstrip() + " …"
    return text


def normalize_endpoint(endpoint: str) -> str:
    """A route with its id-like path segments masked (``/worker/W00042`` → ``/worker/{id}``);
    gateway routes (``/worker/{id}``) and tool names (``tool:query_db``) are unchanged."""
    if not endpoint.startswith("/") or not any(c.isdigit() for c in endpoint):
        return endpoint
    return "/".join("{id}" if _ENDPOINT_SEGMENT.match(part) else part for part in endpoint.split("/"))


def template_of(endpoint: str, error_type: str | None, error: str | None) -> str:
    """``endpoint | error_type | normalized error`` (a missing error leaves the error type alone)."""
    head = f"{normalize_endpoint(endpoint)} | {error_type or '-'}"
    text = normalize(error) if error else ""
    return f"{head} | {text}" if text else head


def signature_id(template: str) -> str:
    """A stable id for a template: ``sig_`` and 16 hex characters of its SHA-256."""
    return SIGNATURE_PREFIX + hashlib.sha256(template.encode()).hexdigest()[:16]


def _mask_json(value: Any) -> Any:
    """A JSON document with its values normalized and its keys kept (the input's shape)."""
    if isinstance(value, dict):
        return {str(k): _mask_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_json(v) for v in value[:20]]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return "<num>"
    return normalize(str(value))


def input_template(input_summary: str | None) -> str:
    """The template of an op's input: JSON keeps its keys and masks its values; text is normalized."""
    if not input_summary:
        return ""
    text = input_summary.strip()
    if text[:1] in "{[":
        try:
            return json.dumps(_mask_json(json.loads(text)), sort_keys=True, ensure_ascii=False)[:1_000]
        except ValueError:
            pass
    return normalize(text, limit=1_000)


def variant_of(input_summary: str | None) -> str:
    """A short stable hash of the op's input template (how many ways a signature is reached)."""
    return hashlib.sha256(input_template(input_summary).encode()).hexdigest()[:VARIANT_CHARS]


class SignatureIndex:
    """Assigns failures to signatures and keeps the signatures' statistics.

    ``signatures`` (signature id → :class:`Signature`) is updated in place, so the analyzer can
    hand in its state object's dict. Templates are cached per (endpoint, error type, error), so a
    repeated message is normalized once. ``trust`` says what each failure's API key counts as
    (:mod:`opslake.analysis.reporters`): every failure is counted, but only trusted keys are
    independent reporters, the count a diagnosis needs before it may become an "avoid" entry.
    """

    def __init__(
        self, signatures: dict[str, Signature] | None = None, *, trust: ReporterTrust | None = None
    ) -> None:
        self.signatures: dict[str, Signature] = {} if signatures is None else signatures
        self.trust = trust or ReporterTrust()
        self._templates: dict[tuple[str, str | None, str | None], tuple[str, str]] = {}
        self._variants: dict[str | None, str] = {}
        self._agents: dict[str, set[str]] = {}
        self._reporters: dict[str, set[str]] = {}
        self._variant_sets: dict[str, set[str]] = {}

    def signature_of(self, endpoint: str, error_type: str | None, error: str | None) -> tuple[str, str]:
        """(signature id, template) of a failure."""
        key = (endpoint, error_type, error)
        found = self._templates.get(key)
        if found is None:
            if len(self._templates) >= _CACHE_LIMIT:
                self._templates.clear()
            template = template_of(endpoint, error_type, error)
            found = self._templates[key] = (signature_id(template), template)
        return found

    def _variant(self, input_summary: str | None) -> str:
        found = self._variants.get(input_summary)
        if found is None:
            if len(self._variants) >= _CACHE_LIMIT:
                self._variants.clear()
            found = self._variants[input_summary] = variant_of(input_summary)
        return found

    def apply(
        self, failures: Iterable[FailureSample], *, count: bool | Set[OpKey] = True
    ) -> list[FailureRow]:
        """The failure row of each failure (each gets exactly one signature).

        ``count`` says which failures update the statistics: all (``True``), none (``False``: the
        caller re-assigns failures it has already counted) or those whose (``reporter_id``,
        ``op_id``) is in the set (op ids are unique per API key only).
        A signature first met by a failure that is not counted is created empty (count 0), so that
        every failure row refers to a known signature.
        """
        rows: list[FailureRow] = []
        for failure in failures:
            sig_id, template = self.signature_of(failure.endpoint, failure.error_type, failure.error)
            sig = self.signatures.get(sig_id)
            if sig is None:
                sig = self.signatures[sig_id] = Signature(
                    signature_id=sig_id,
                    endpoint=normalize_endpoint(failure.endpoint),
                    error_type=failure.error_type,
                    template=template,
                    first_seen=failure.ts,
                    last_seen=failure.ts,
                )
            if count if isinstance(count, bool) else (failure.reporter_id, failure.op_id) in count:
                self._count(sig, failure)
            # the fields come from a validated FailureSample and a signature id built here
            rows.append(
                FailureRow.model_construct(
                    op_id=failure.op_id,
                    reporter_id=failure.reporter_id,
                    signature_id=sig_id,
                    endpoint=failure.endpoint,
                    agent_id=failure.agent_id,
                    error_type=failure.error_type,
                    ts=failure.ts,
                    ingested_at=failure.ingested_at,
                )
            )
        return rows

    def _count(self, sig: Signature, failure: FailureSample) -> None:
        if sig.count == 0:
            sig.first_seen = sig.last_seen = failure.ts
        elif failure.ts < sig.first_seen:
            sig.first_seen = failure.ts
        elif failure.ts > sig.last_seen:
            sig.last_seen = failure.ts
        sig.count += 1
        agents = self._agents.get(sig.signature_id)
        if agents is None:
            agents = self._agents[sig.signature_id] = set(sig.agents)
        if failure.agent_id not in agents and len(agents) < MAX_TRACKED_AGENTS:
            agents.add(failure.agent_id)
            sig.agents.append(failure.agent_id)
        # saturates at MAX_TRACKED_AGENTS: beyond it a new agent cannot be told from a known one
        sig.agent_count = max(sig.agent_count, len(sig.agents))
        witness = self.trust.witness(failure.reporter_id, failure.agent_id)
        if witness is not None:
            reporters = self._reporters.get(sig.signature_id)
            if reporters is None:
                reporters = self._reporters[sig.signature_id] = set(sig.reporters)
            if admits(reporters, witness):  # per key first: one runtime key cannot crowd others out
                reporters.add(witness)
                sig.reporters.append(witness)
                sig.reporter_count = self.trust.count(sig.reporters)
        variants = self._variant_sets.get(sig.signature_id)
        if variants is None:
            variants = self._variant_sets[sig.signature_id] = set(sig.variants)
        if len(variants) < MAX_VARIANTS:
            variant = self._variant(failure.input_summary)
            if variant not in variants:
                variants.add(variant)
                sig.variants.append(variant)
        if len(sig.sample_op_ids) < MAX_SAMPLE_OP_IDS and failure.op_id not in sig.sample_op_ids:
            sig.sample_op_ids.append(failure.op_id)


def apply_failures(
    signatures: dict[str, Signature], failures: Iterable[FailureSample], *, count: bool | Set[OpKey] = True
) -> list[FailureRow]:
    """:meth:`SignatureIndex.apply` for a one-off batch."""
    return SignatureIndex(signatures).apply(failures, count=count)


def needs_diagnosis(
    sig: Signature, *, growth_factor: float = 2.0, min_growth: int = 10, min_new_variants: int = 2
) -> Reason | None:
    """Why ``sig`` should be (re)diagnosed, or None.

    * ``new``: it has failures and was never diagnosed;
    * ``grown``: it has at least ``growth_factor`` times the failures it had when last diagnosed,
      and at least ``min_growth`` more;
    * ``new_variants``: it is reached through ``min_new_variants`` or more input variants that
      it did not have when last diagnosed (and has new failures).
    """
    if sig.count == 0:
        return None
    if sig.diagnoses == 0 and sig.last_diagnosed_at is None:
        return "new"
    grown = sig.count - sig.diagnosed_count
    if sig.count >= sig.diagnosed_count * growth_factor and grown >= min_growth:
        return "grown"
    if grown > 0 and len(sig.variants) - sig.diagnosed_variants >= min_new_variants:
        return "new_variants"
    return None


def select_for_diagnosis(
    signatures: Iterable[Signature] | Mapping[str, Signature],
    budget: int,
    *,
    growth_factor: float = 2.0,
    min_growth: int = 10,
    min_new_variants: int = 2,
) -> list[tuple[Signature, Reason]]:
    """At most ``budget`` signatures that need a diagnosis, most frequent first (ties by id)."""
    if budget <= 0:
        return []
    values = signatures.values() if isinstance(signatures, Mapping) else signatures
    chosen: list[tuple[Signature, Reason]] = []
    for sig in sorted(values, key=lambda s: (-s.count, s.signature_id)):
        reason = needs_diagnosis(
            sig, growth_factor=growth_factor, min_growth=min_growth, min_new_variants=min_new_variants
        )
        if reason is not None:
            chosen.append((sig, reason))
            if len(chosen) >= budget:
                break
    return chosen


def mark_diagnosed(sig: Signature, *, diagnosis_id: str, at: datetime) -> None:
    """Record on ``sig`` that it was diagnosed at ``at`` (a UTC datetime): what
    :func:`needs_diagnosis` compares with next time."""
    sig.diagnosed_count = sig.count
    sig.diagnosed_variants = len(sig.variants)
    sig.diagnoses += 1
    sig.last_diagnosed_at = at
    sig.last_diagnosis_id = diagnosis_id
