"""Masking rules as data: one rule set that Python, Athena (Trino) and DuckDB apply identically.

An error message is *normalized* by masking its variable parts (UUIDs, timestamps, numbers,
quoted names, paths, ids …) with placeholders, so that ``Column 'salry' cannot be resolved`` and
``Column 'ratng' cannot be resolved`` give one template. The rules are a list of
``(pattern, replacement)`` steps applied in order, each replacing every match: Python runs them
with :mod:`re` (:func:`normalize`), the jobs run them in the engine as nested ``regexp_replace``
calls (:func:`normalize_sql`, Athena SQL; the embedded engine runs it on DuckDB through
:func:`opslake.query.dialect.to_duckdb`). A failure's template and signature id are therefore the
same whether Python or the engine computes them (tests/unit/analysis/test_masking.py checks Python against
DuckDB on real texts; there is no Trino here, so the patterns keep to what the engines agree on).

Trino's ``regexp_*`` functions use joni (Oniguruma-like, backtracking), DuckDB's use RE2, Python
its own backtracking ``re``. The patterns avoid every construct where they differ:

* no lookbehind/lookahead and no backreferences (RE2 has neither): a boundary that needs context
  *captures* the neighbouring character and puts it back in the replacement (``$1<num>$2``);
* no ``\\w``, ``\\d``, ``\\s``, ``\\b`` (Unicode-aware in joni, ASCII in RE2): explicit ASCII classes;
* no ``.`` except where no newline can occur, no ``(?i)`` (joni and RE2 fold Unicode case, e.g.
  the Kelvin sign) and no class of a letter and its other case such as ``[kK]`` (RE2 turns it into
  a case-folded literal, Unicode-folded inside an alternation): ``(?:k|K)``; no possessive or
  atomic groups, no named groups, no ``\\z``/``\\Z``;
* ``^``/``$`` only on text that holds no newline any more (joni's ``^`` also matches after a
  newline, ``$`` in Java/Python style before a final one); whitespace is collapsed first, and
  the text is padded with a space on each side so that a boundary is always a character;
* replacements use only literal text without ``\\`` or ``$`` and ``$1``..``$9`` group references
  (Trino's syntax; the dialect layer turns them into RE2's ``\\1`` and asks DuckDB for every
  match, not the first);
* alternations are leftmost-first in all three engines, and RE2 reports the same submatches as a
  backtracking engine, so a greedy pattern matches the same text everywhere.

A rule whose match consumes a trailing context character can hide the next token that needs that
character as its leading context (``1, 2``: the match of ``1`` eats the ``,``); such rules are
applied twice (``twice=True``), which masks every token of a list.

``length``/``substr`` count code points in all three. Hashes: ``sha256`` of the UTF-8 bytes, as
lower-case hex (Trino ``lower(to_hex(sha256(to_utf8(x))))``; the dialect layer gives DuckDB the
same text).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

MAX_NORMALIZED_CHARS = 300  # of a normalized error (the template adds endpoint and error type)
MAX_SCANNED_CHARS = 2_000  # of the raw text: bounds the work per message
MAX_INPUT_TEMPLATE_CHARS = 1_000
VARIANT_CHARS = 12
#: Of a normalized endpoint: a signature's endpoint is an Id (MAX_ID_CHARS in opslake.models.ops,
#: not imported: models import the ingest package), and masking lengthens a valid 200-character
#: endpoint ("/1" * 100 becomes "/{id}" * 100); a longer one keeps its first 198 and " …".
MAX_ENDPOINT_CHARS = 200
SIGNATURE_PREFIX = "sig_"
SIGNATURE_HEX_CHARS = 16
CUT_MARK = " …"

_W = "A-Za-z0-9_"  # an ASCII word character (what \w means in RE2, and here everywhere)
_HEX = "0-9a-fA-F"
_NOT_WORD = f"([^{_W}])"  # a captured boundary: a character that is not a word character


def _ci(word: str) -> str:
    """``word`` matched case-insensitively in ASCII only. Neither ``(?i)`` nor ``[kK]``: RE2 reads a
    class of exactly a letter and its other case as a case-folded literal, which, merged into an
    alternation with other one-letter alternatives, folds Unicode case (KELVIN SIGN for k, LONG S
    for s); the alternation ``(?:k|K)`` stays the two ASCII letters in RE2, joni and Python."""
    return "".join(
        f"(?:{c.lower()}|{c.upper()})" if c.isascii() and c.isalpha() else re.escape(c) for c in word
    )


def _mixed_hex(min_chars: int) -> str:
    """``min_chars`` or more hex characters holding a digit and a letter, with no lookahead: the
    first run of one kind (``k`` long) is followed by the other kind and enough characters."""
    alternatives = []
    for first, other in (("[0-9]", "[a-fA-F]"), ("[a-fA-F]", "[0-9]")):
        alternatives.append(f"{first}{{{min_chars - 1},}}{other}[{_HEX}]*")
        alternatives += [
            f"{first}{{{k}}}{other}[{_HEX}]{{{min_chars - 1 - k},}}" for k in range(1, min_chars - 1)
        ]
    return "|".join(alternatives)


_MIXED_HEX = _mixed_hex(8)
_UNITS = "|".join(
    _ci(unit)
    for unit in [
        "ms",
        "us",
        "µs",
        "ns",
        "s",
        "sec",
        "secs",
        "m",
        "min",
        "mins",
        "h",
        "hr",
        "hrs",
        "d",
        "b",
        "kb",
        "mb",
        "gb",
        "tb",
        "kib",
        "mib",
        "gib",
        "k",
        "x",
        "%",
    ]
)


@dataclass(frozen=True)
class Rule:
    """One masking step: every match of ``pattern`` becomes ``replacement`` (``$n``: group n)."""

    name: str
    pattern: str
    replacement: str
    twice: bool = False  # see the module docstring: a consumed trailing context hides a neighbour

    def python_replacement(self) -> str:
        return re.sub(r"\$([0-9])", r"\\\1", self.replacement)


#: The space-collapsing step comes first (after padding the text with a space on each side).
_COLLAPSE = Rule("space", "[\\t\\n\\x0B\\x0C\\r ]+", " ")

#: Applied in this order: whole tokens first (URLs, e-mails, ARNs, quoted literals, paths) so their
#: insides are not masked piecemeal; then shapes that contain digits (UUIDs, timestamps, dates,
#: times, IPs, 0x hex, ULIDs) before numbers with units, generic ids and plain numbers.
MASKING_RULES: tuple[Rule, ...] = (
    Rule("url", "[A-Za-z][A-Za-z0-9+.-]*://[^ '\"`<>]+", "<url>"),
    Rule("email", "[A-Za-z0-9_.+-]+@[A-Za-z0-9-]+(?:[.][A-Za-z0-9-]+)+", "<email>"),
    Rule("arn", "arn:aws[A-Za-z0-9_-]*:[^ '\"`,;)\\]]+", "<arn>"),
    Rule("str1", f"([^{_W}'\\\\])'[^']{{0,200}}'{_NOT_WORD}", "$1<str>$2", twice=True),
    Rule("str2", f'([^{_W}"\\\\])"(?:[^"\\\\]|\\\\.){{0,200}}"{_NOT_WORD}', "$1<str>$2", twice=True),
    Rule("str3", "`[^`]{0,200}`", "<str>"),
    # /var/task/app.py, ~/x/y, ../a/b (not inside a word, a URL or a placeholder)
    Rule("path", f"([^{_W}<>/:.-])(?:~|[.][.]?)?(?:/[{_W}.@+-]+){{2,}}/?", "$1<path>"),
    Rule("winpath", f"([^{_W}])[A-Za-z]:\\\\[^ '\"`]+", "$1<path>"),  # C:\Users\x
    # reports/x/file_3.csv
    Rule(
        "relpath",
        f"([^{_W}.-])[{_W}.-]+(?:/[{_W}.-]+)+[.][A-Za-z][{_W}]{{0,4}}{_NOT_WORD}",
        "$1<path>$2",
        twice=True,
    ),
    Rule(
        "uuid",
        f"{_NOT_WORD}[{_HEX}]{{8}}-[{_HEX}]{{4}}-[{_HEX}]{{4}}-[{_HEX}]{{4}}-[{_HEX}]{{12}}{_NOT_WORD}",
        "$1<uuid>$2",
        twice=True,
    ),
    Rule(
        "ts",
        f"{_NOT_WORD}[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}[T ][0-9]{{2}}:[0-9]{{2}}(?::[0-9]{{2}}(?:[.,][0-9]+)?)?"
        f"(?: ?Z| ?[+-][0-9]{{2}}:?[0-9]{{2}}| ?UTC)?{_NOT_WORD}",
        "$1<ts>$2",
        twice=True,
    ),
    Rule("date", f"{_NOT_WORD}[0-9]{{4}}[-/][0-9]{{2}}[-/][0-9]{{2}}{_NOT_WORD}", "$1<date>$2", twice=True),
    Rule(
        "time",
        f"{_NOT_WORD}[0-9]{{1,2}}:[0-9]{{2}}:[0-9]{{2}}(?:[.,][0-9]+)?{_NOT_WORD}",
        "$1<time>$2",
        twice=True,
    ),
    Rule(
        "ip",
        f"{_NOT_WORD}[0-9]{{1,3}}(?:[.][0-9]{{1,3}}){{3}}(?::[0-9]{{1,5}})?{_NOT_WORD}",
        "$1<ip>$2",
        twice=True,
    ),
    Rule("hex", f"{_NOT_WORD}0[xX][{_HEX}]+{_NOT_WORD}", "$1<hex>$2", twice=True),
    # a hash: 8+ hex characters mixing digits and letters (not a word such as "deadbeef", not a number)
    Rule("hash", f"([^{_W}-])(?:{_MIXED_HEX})([^{_W}-])", "$1<hex>$2", twice=True),
    Rule("ulid", f"{_NOT_WORD}[0-7][0-9A-HJKMNP-TV-Z]{{25}}{_NOT_WORD}", "$1<ulid>$2", twice=True),
    Rule(
        "quantity",
        # not inside a token joined by "-" (org-999628070d is an id, not 999628070 days): a "-"
        # before the number counts as a boundary only when a non-word character precedes it
        f"([^{_W}]-|[^{_W}.-])[0-9]+(?:[.][0-9]+)?(?:{_UNITS})([^{_W}%])",
        "$1<num>$2",
        twice=True,
    ),
    # a token of letters, digits, _ and - holding both a digit and a letter: W-00123, worker_12, i-0ab3,
    # and long hex hashes (9f86d081884c7d65); greedy to the end of the token, so no trailing context
    Rule(
        "id",
        f"([^{_W}<-])(?:[A-Za-z_][{_W}-]*[0-9][{_W}-]*|[0-9][0-9-]*[A-Za-z_][{_W}-]*)",
        "$1<id>",
    ),
    Rule(
        "number",
        f"([^{_W}.])(?:[0-9]{{1,3}}(?:,[0-9]{{3}})+|[0-9]+)(?:[.][0-9]+)?(?:[eE][-+]?[0-9]+)?{_NOT_WORD}",
        "$1<num>$2",
        twice=True,
    ),
    Rule("digits", "[0-9]+", "<num>"),  # digits glued to punctuation the rules above leave alone
)
PLACEHOLDERS = (
    "url",
    "email",
    "arn",
    "str",
    "path",
    "uuid",
    "ts",
    "date",
    "time",
    "ip",
    "hex",
    "ulid",
    "num",
    "id",
)
#: ``[<num>, <num>, <num>]`` → ``[<num>, ...]`` (one rule per placeholder: no backreferences).
RUN_RULES: tuple[Rule, ...] = tuple(
    Rule(f"run_{p}", f"<{p}>(?: ?, ?<{p}>)+", f"<{p}>, ...") for p in PLACEHOLDERS
)
#: The padding spaces (and any other leading/trailing space): the text holds no newline here.
_STRIP = Rule("strip", "^ | $", "")


def _cut_rule(limit: int) -> Rule:
    """Text longer than ``limit`` keeps its first ``limit - 2`` characters and a newline (which
    no normalized text holds) marks the cut; ``.`` is safe: the text holds no newline."""
    return Rule("cut", f"^(.{{{limit - 2}}}).{{3,}}$", "$1\n")


def _cut_tail() -> Rule:
    """At a cut, a partial placeholder and trailing spaces go, and `` …`` is appended."""
    return Rule("cut_tail", " *<[a-z]*\n| *\n", CUT_MARK)


#: Endpoint path segments that are ids: digits, a UUID, or 4+ of [A-Za-z0-9_.-] holding a digit.
_SEGMENT_CLASS = f"[{_W}.-]"
_ID_SEGMENT = (
    f"[0-9]+|[{_HEX}]{{8}}-[{_HEX}]{{4}}-[{_HEX}]{{4}}-[{_HEX}]{{4}}-[{_HEX}]{{12}}"
    f"|[0-9]{_SEGMENT_CLASS}{{3,}}|{_SEGMENT_CLASS}[0-9]{_SEGMENT_CLASS}{{2,}}"
    f"|{_SEGMENT_CLASS}{{2}}[0-9]{_SEGMENT_CLASS}+|{_SEGMENT_CLASS}{{3,}}[0-9]{_SEGMENT_CLASS}*"
)
# applied to the endpoint with a "/" appended; the segment's closing "/" is consumed, so twice
_ENDPOINT_RULE = Rule("endpoint_segment", f"/(?:{_ID_SEGMENT})/", "/{id}/", twice=True)
#: What may precede a JSON document's first character (removed only to look at that character).
_SPACE_CLASS = "[\\t\\n\\x0B\\x0C\\r ]+"

_STEPS: tuple[Rule, ...] = (_COLLAPSE, *MASKING_RULES, *RUN_RULES, _STRIP)


# -- Python mirror ------------------------------------------------------------------------------
#: A shortcut for Python only: a rule cannot match a text in which this simpler pattern is not found.
_NEEDS: dict[str, re.Pattern[str]] = {
    name: re.compile(needs, re.ASCII)
    for name, needs in {
        "url": "://",
        "email": "@",
        "arn": "arn:aws",
        "str1": "'",
        "str2": '"',
        "str3": "`",
        "path": "/",
        "winpath": ":\\\\",
        "relpath": "/",
        "uuid": f"-[{_HEX}]{{4}}-",
        "ts": "[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]",
        "date": "[0-9]{4}[-/][0-9]{2}[-/]",
        "time": "[0-9]:[0-9]{2}:[0-9]",
        "ip": "[0-9][.][0-9]{1,3}[.]",
        "hex": "0[xX]",
        "hash": f"[{_HEX}]{{8}}",
        "ulid": "[0-7][0-9A-Z]{25}",
        "quantity": "[0-9][A-Za-zµ%]",
        "id": "[0-9]",
        "number": "[0-9]",
        "digits": "[0-9]",
        **{f"run_{p}": f"<{p}> ?," for p in PLACEHOLDERS},
    }.items()
}
_COMPILED: dict[str, tuple[re.Pattern[str], str]] = {}


def _sub(rule: Rule, text: str) -> str:
    found = _COMPILED.get(rule.pattern)
    if found is None:
        found = _COMPILED[rule.pattern] = (re.compile(rule.pattern, re.ASCII), rule.python_replacement())
    pattern, replacement = found
    text = pattern.sub(replacement, text)
    return pattern.sub(replacement, text) if rule.twice else text


def _masked(text: str) -> str:
    text = f" {text[:MAX_SCANNED_CHARS]} "
    for rule in _STEPS:
        needs = _NEEDS.get(rule.name)
        if needs is None or needs.search(text) is not None:
            text = _sub(rule, text)
    return text


def _cut(text: str, limit: int) -> str:
    return _sub(_cut_tail(), _sub(_cut_rule(limit), text))


def normalize(text: str, *, limit: int = MAX_NORMALIZED_CHARS) -> str:
    """``text`` with its variable parts masked, whitespace collapsed, at most ``limit`` characters."""
    return _cut(_masked(text), limit)


def normalize_endpoint(endpoint: str) -> str:
    """A route with its id-like path segments masked (``/worker/W00042`` → ``/worker/{id}``);
    gateway routes (``/worker/{id}``) and tool names (``tool:query_db``) are unchanged."""
    if not endpoint.startswith("/") or re.search("[0-9]", endpoint) is None:
        return endpoint
    masked = _sub(_ENDPOINT_RULE, endpoint + "/")[:-1]
    if len(masked) <= MAX_ENDPOINT_CHARS:
        return masked
    return masked[: MAX_ENDPOINT_CHARS - len(CUT_MARK)] + CUT_MARK  # ends in "…": never in a space


def template_of(endpoint: str, error_type: str | None, error: str | None) -> str:
    """``endpoint | error_type | normalized error`` (a missing error leaves the error type alone)."""
    head = f"{normalize_endpoint(endpoint)} | {error_type or '-'}"
    text = normalize(error) if error else ""
    return f"{head} | {text}" if text else head


def signature_id(template: str) -> str:
    """A stable id for a template: ``sig_`` and 16 hex characters of its SHA-256."""
    return SIGNATURE_PREFIX + hashlib.sha256(template.encode()).hexdigest()[:SIGNATURE_HEX_CHARS]


def input_template(input_summary: str | None) -> str:
    """The template of an op's input: its text normalized. A JSON document (starting with ``{`` or
    ``[``) loses its double quotes first, so that its keys stay and its values are masked inside
    (``{"sql": "SELECT a FROM t WHERE id = 'W1'"}`` → ``{sql: SELECT a FROM t WHERE id = <str>}``)
    rather than each string becoming ``<str>``. Key order counts (the engine cannot sort keys the
    same way in both dialects)."""
    if not input_summary:
        return ""
    text = input_summary[:MAX_SCANNED_CHARS]
    if re.sub(_SPACE_CLASS, "", text)[:1] in ("{", "["):
        text = text.replace('"', "")
    return normalize(text, limit=MAX_INPUT_TEMPLATE_CHARS)


def variant_of(input_summary: str | None) -> str:
    """A short stable hash of the op's input template (how many ways a signature is reached)."""
    return hashlib.sha256(input_template(input_summary).encode()).hexdigest()[:VARIANT_CHARS]


# -- SQL (Athena dialect) -----------------------------------------------------------------------
def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_sub(rule: Rule, expr: str) -> str:
    expr = f"regexp_replace({expr}, {_literal(rule.pattern)}, {_literal(rule.replacement)})"
    if rule.twice:
        expr = f"regexp_replace({expr}, {_literal(rule.pattern)}, {_literal(rule.replacement)})"
    return expr


def _masked_sql(expr: str) -> str:
    text = f"(' ' || substr({expr}, 1, {MAX_SCANNED_CHARS}) || ' ')"
    for rule in _STEPS:
        text = _sql_sub(rule, text)
    return text


def _cut_sql(masked: str, limit: int) -> str:
    return _sql_sub(_cut_tail(), _sql_sub(_cut_rule(limit), masked))


def normalize_sql(expr: str, *, limit: int = MAX_NORMALIZED_CHARS) -> str:
    """Athena SQL for :func:`normalize` of the varchar ``expr`` (NULL stays NULL)."""
    return _cut_sql(_masked_sql(expr), limit)


def normalize_endpoint_sql(endpoint_expr: str) -> str:
    """Athena SQL for :func:`normalize_endpoint`."""
    padded = _sql_sub(_ENDPOINT_RULE, f"({endpoint_expr} || '/')")
    return (
        f"(CASE WHEN substr({endpoint_expr}, 1, 1) <> '/' OR NOT regexp_like({endpoint_expr}, '[0-9]') "
        f"THEN {endpoint_expr} WHEN length({padded}) <= {MAX_ENDPOINT_CHARS + 1} "
        f"THEN substr({padded}, 1, length({padded}) - 1) "
        f"ELSE substr({padded}, 1, {MAX_ENDPOINT_CHARS - len(CUT_MARK)}) || {_literal(CUT_MARK)} END)"
    )


def template_sql(endpoint_expr: str, error_type_expr: str, error_expr: str) -> str:
    """Athena SQL for :func:`template_of` of three varchar expressions (the same text)."""
    error = normalize_sql(f"coalesce({error_expr}, '')")
    head = f"{normalize_endpoint_sql(endpoint_expr)} || ' | ' || coalesce(nullif({error_type_expr}, ''), '-')"
    # " | " and the normalized error, or nothing when that is empty (the error appears once)
    return f"({head} || regexp_replace(' | ' || {error}, '^ [|] $', ''))"


def _hex_sql(expr: str) -> str:
    return f"lower(to_hex(sha256(to_utf8({expr}))))"


def signature_id_sql(template_expr: str) -> str:
    """Athena SQL for :func:`signature_id` of a template expression."""
    return f"({_literal(SIGNATURE_PREFIX)} || substr({_hex_sql(template_expr)}, 1, {SIGNATURE_HEX_CHARS}))"


def input_template_sql(input_expr: str) -> str:
    """Athena SQL for :func:`input_template` of the varchar ``input_expr`` (NULL → '')."""
    text = f"substr(coalesce({input_expr}, ''), 1, {MAX_SCANNED_CHARS})"
    first = f"substr(regexp_replace({text}, {_literal(_SPACE_CLASS)}, ''), 1, 1)"
    unquoted = f"(CASE WHEN {first} IN ('{{', '[') THEN replace({text}, '\"', '') ELSE {text} END)"
    return _cut_sql(_masked_sql(unquoted), MAX_INPUT_TEMPLATE_CHARS)


def variant_sql(input_expr: str) -> str:
    """Athena SQL for :func:`variant_of`."""
    return f"substr({_hex_sql(input_template_sql(input_expr))}, 1, {VARIANT_CHARS})"
