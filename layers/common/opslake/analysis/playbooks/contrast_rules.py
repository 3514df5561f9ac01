"""Contrast rules over SQL, request bodies and prompts: the real ``column`` of a table, ``aggregate``
in SQL instead of listing rows past a row limit, a ``json_body`` built with an encoder, a
``prompt_bound`` in tokens. Tables and columns are the Glue catalog's (the vocabulary's), never a
list in code; see :mod:`.contrast` for the samples, the groups and the other rules.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from opslake.analysis.catalog.known import Vocabulary
from opslake.analysis.heuristics import COLUMN_NAMES, clean_name
from opslake.analysis.playbooks.contrast import (
    MIN_SUCCESS_REPORTERS,
    MIN_SUCCESSES,
    SUCCESS_SHARE,
    Fix,
    Sample,
    method_of,
    parse_call,
    route_call,
)
from opslake.analysis.playbooks.contrast_sql import MAX_INPUT_CHARS
from opslake.models.ops import TRUNCATION_MARK

MIN_NAME_REPORTERS = 2  # reporters that must have written a wrong name before an entry quotes it
MAX_QUOTED = 3
JSON_SUCCESS_SHARE = 0.9
AGGREGATE_NAMES = ("count(*)", "avg()")
JSON_ENCODER_NAME = "json.dumps"
_AGGREGATE = re.compile(r"\b(?:count|avg|sum|min|max|approx_distinct)\s*\(|\bgroup\s+by\b", re.I)
_SQL_LIMIT = re.compile(r"\blimit\s+\d+\s*$", re.I)
_SQL_TABLES = re.compile(r"(?i)\b(?:from|join)\s+[\"`]?([A-Za-z_]\w*)")
_SQL_TOKEN = re.compile(
    r"'(?:[^']|'')*'?|\"(?:[^\"]|\"\")*\"|\d+(?:\.\d+)?|[A-Za-z_][A-Za-z0-9_]*|<>|!=|<=|>=|\|\||\S"
)
_TRUNCATED = re.compile(r"truncated|row limit|row cap", re.I)


def _sql_tokens(sql: str) -> list[str]:
    """SQL as tokens, literals masked (strings ``'?'``, numbers ``0``), identifiers lower case."""
    out = []
    for token in _SQL_TOKEN.findall(sql):
        if token.startswith("'"):
            out.append("'?'")
        elif token[0].isdigit():
            out.append("0")
        elif token.startswith('"'):
            out.append(token.strip('"').lower())
        else:
            out.append(token.lower())
    return out


def _tables(sql: str, vocabulary: Vocabulary) -> list[str]:
    found: list[str] = []
    for name in _SQL_TABLES.findall(sql):
        if name.lower() in vocabulary.tables and name.lower() not in found:
            found.append(name.lower())
    return found


def _quoted_names(names_by_reporter: Mapping[str, set[str]]) -> list[str]:
    """The wrong names written by enough reporters (most reporters first), as plain identifiers."""
    kept = [
        (name, len(reporters))
        for name, reporters in names_by_reporter.items()
        if len(reporters) >= MIN_NAME_REPORTERS and clean_name(name) == name
    ]
    kept.sort(key=lambda p: (-p[1], p[0]))
    return [name for name, _ in kept[:MAX_QUOTED]]


def _unresolved_column(error: str) -> str | None:
    for pattern in COLUMN_NAMES:
        match = pattern.search(error)
        if match:
            return match[1].rsplit(".", 1)[-1].strip('"').lower()
    return None


def column_fixes(
    failures: Sequence[Sample], successes: Sequence[Sample], vocabulary: Vocabulary
) -> list[Fix]:
    """``column``: the real column behind each unresolved name, from successes shaped like the
    failing SQL with one identifier in the hole; one fix per (table, column)."""
    success_tokens = [(s, _sql_tokens(sql)) for s in successes if (sql := parse_call(s.input_summary).sql)]
    found: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    support: dict[tuple[str, str], dict[str, Sample]] = defaultdict(dict)
    wrong: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for failure in failures:
        name = _unresolved_column(failure.error)
        sql = parse_call(failure.input_summary).sql
        if not name or not sql:
            continue
        tables = _tables(sql, vocabulary)
        tokens = _sql_tokens(sql)
        holes = [i for i, t in enumerate(tokens) if t == name]
        if not tables or not holes:
            continue
        # each filler's votes are the keys that wrote it (not its ops): one key sending many
        # successful queries over another column cannot steer the fix, and a column needs two keys
        voters: dict[str, set[str]] = defaultdict(set)
        by_filler: dict[str, list[Sample]] = defaultdict(list)
        for success, other in success_tokens:
            if len(other) != len(tokens) or len({other[i] for i in holes}) != 1:
                continue
            if all(a == b for i, (a, b) in enumerate(zip(tokens, other, strict=True)) if i not in holes):
                filler = other[holes[0]]
                if filler != name and filler in vocabulary.tables[tables[0]]:
                    voters[filler].add(success.reporter_id or "")
                    by_filler[filler].append(success)
        fillers = {c: len(keys) for c, keys in voters.items() if len(keys) >= MIN_SUCCESS_REPORTERS}
        if not fillers:
            continue
        column = min(fillers, key=lambda c: (-fillers[c], c))
        key = (tables[0], column)
        found[key].append(failure)
        support[key].update((s.op_id, s) for s in by_filler[column])
        wrong[key][name].add(failure.reporter_id or "")
    fixes = []
    for (table, column), fails in sorted(found.items()):
        quoted = _quoted_names(wrong[(table, column)])
        fixes.append(
            Fix(
                "column", (table, column), f"SQL over {table}", f"Use the column {column} of {table}",
                ", ".join(quoted) if quoted else "a column name guessed from the question",
                tuple(fails), tuple(support[(table, column)].values()),
            )
        )  # fmt: skip
    return fixes


def aggregate_fixes(
    failures: Sequence[Sample], successes: Sequence[Sample], vocabulary: Vocabulary
) -> list[Fix]:
    """``aggregate``: the runtime found answers cut at the row limit after SQL that lists rows;
    successes on the same tables aggregate (or limit) in SQL."""
    cut = [
        (f, sql)
        for f in failures
        if (f.error_type == "result_truncated" or _TRUNCATED.search(f.error))
        and (sql := parse_call(f.linked_input or f.input_summary).sql)
    ]
    listing = [(f, sql) for f, sql in cut if not _AGGREGATE.search(sql)]
    if not listing or len(listing) * 2 < len(cut):
        return []
    tables = {t for _, sql in listing for t in _tables(sql, vocabulary)}
    on_tables = [
        (s, sql)
        for s in successes
        if (sql := parse_call(s.input_summary).sql) and tables & set(_tables(sql, vocabulary))
    ]
    if len(on_tables) < MIN_SUCCESSES:
        return []
    bounded = [(s, sql) for s, sql in on_tables if _AGGREGATE.search(sql) or _SQL_LIMIT.search(sql.strip())]
    if len(bounded) < SUCCESS_SHARE * len(on_tables) or not any(_AGGREGATE.search(sql) for _, sql in bounded):
        return []
    endpoint = failures[0].endpoint
    call = route_call(method_of(replace(f, input_summary=f.linked_input or "") for f, _ in listing), endpoint)
    return [
        Fix(
            "aggregate", AGGREGATE_NAMES, f"Answering a count, average or top-N question with {call}",
            f"Aggregate in SQL (count(*), avg()) instead of listing rows: {endpoint} cuts answers at its row limit",
            "rows listed and then counted outside SQL", tuple(f for f, _ in listing), tuple(s for s, _ in bounded),
        )
    ]  # fmt: skip


def _cut(text: str) -> bool:
    """Whether a recorded input was cut short (ingest's truncation mark, or the samples' limit)."""
    return text.endswith(TRUNCATION_MARK) or len(text) >= MAX_INPUT_CHARS


def json_body_fixes(failures: Sequence[Sample], successes: Sequence[Sample]) -> list[Fix]:
    """``json_body``: the failing bodies are not JSON where the successes' are."""
    bodies = [(f, parse_call(f.input_summary)) for f in failures]
    # a body cut at its recorded length (ingest's mark, or the samples' character limit) does not
    # parse for that reason alone: it shows nothing about how it was written
    broken = [
        f
        for f, c in bodies
        if c.body_text.lstrip()[:1] in ("{", "[") and not c.parsed and not _cut(f.input_summary)
    ]
    passing = [(s, c) for s in successes if (c := parse_call(s.input_summary)).body_text.strip()]
    if not broken or len(broken) * 2 < len(failures) or len(passing) < MIN_SUCCESSES:
        return []
    parsed = [s for s, c in passing if c.parsed]
    if len(parsed) < JSON_SUCCESS_SHARE * len(passing):
        return []
    call = route_call(method_of(broken) or "POST", failures[0].endpoint)
    return [
        Fix(
            "json_body", (JSON_ENCODER_NAME,), f"Sending a JSON body to {call}",
            f"Build the {call} body with a JSON encoder (json.dumps), never by hand",
            "a body written by hand that is not valid JSON", tuple(broken), tuple(parsed),
        )
    ]  # fmt: skip


def round_down(value: int, digits: int = 2) -> int:
    """``value`` cut to its first ``digits`` significant digits (11873 → 11000): a bound that stays
    the same from run to run while the largest success moves a little (the bound is one of the
    fix's names, so of its entry's id)."""
    scale = 10 ** max(0, len(str(value)) - digits)
    return value // scale * scale


def prompt_bound_fixes(failures: Sequence[Sample], successes: Sequence[Sample]) -> list[Fix]:
    """``prompt_bound``: every successful model call's prompt was smaller than every failing one's;
    the bound is the largest success's size, rounded down (:func:`round_down`)."""
    failing = [f for f in failures if f.input_tokens is not None]
    passing = [s for s in successes if s.input_tokens is not None]
    if not failing or len(passing) < MIN_SUCCESSES:
        return []
    largest = max(s.input_tokens or 0 for s in passing)
    smallest = min(f.input_tokens or 0 for f in failing)
    if largest >= smallest:
        return []
    bound = round_down(largest)
    endpoint = failures[0].endpoint
    return [
        Fix(
            "prompt_bound", (str(bound),), f"Calling the model ({endpoint})",
            f"Keep model prompts under {bound} input tokens", f"prompts of {smallest} input tokens or more",
            tuple(failing), tuple(passing),
        )
    ]  # fmt: skip


def request_fixes(
    failures: Sequence[Sample], successes: Sequence[Sample], vocabulary: Vocabulary
) -> list[Fix]:
    """The SQL, body and prompt rules' fixes for one failure group."""
    return [
        *column_fixes(failures, successes, vocabulary),
        *aggregate_fixes(failures, successes, vocabulary),
        *json_body_fixes(failures, successes),
        *prompt_bound_fixes(failures, successes),
    ]
