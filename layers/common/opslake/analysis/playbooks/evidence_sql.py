"""The consolidator's evidence, tallied by the engine: one query per kind of group whose rows are
bounded by groups, not by ops.

:func:`success_tallies_sql` and :func:`log_tallies_sql` (Athena SQL; the embedded engine runs it on
DuckDB through the dialect layer) compute, for each group with enough evidence, what
:class:`~.grouping.GroupTally` holds: the group key (the call shape in SQL:
:func:`success_template_sql`, the mirror of :func:`~.grouping.success_template`), counts, the first
:data:`MAX_TRACKED_AGENTS` claimed agents, the witnesses capped per key first as
:func:`~opslake.analysis.reporters.cap_witnesses` does, the last :data:`MAX_EVIDENCE` op ids, the
first texts and, for ``/log`` groups, each approach's witnesses. :func:`tallies_from_rows` reads
the rows back. The window is scanned once per query; each group's lists come out as rows (element
``n`` of each list), since Athena returns arrays as text.

The same tallies over rows in memory are :func:`~.grouping.tally_successes` and
:func:`~.grouping.tally_logs`; tests/unit/analysis/test_evidence_sql.py checks one against the other.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from opslake.analysis.masking import input_template_sql, normalize_sql
from opslake.analysis.playbooks.grouping import (
    ASCII_UPPER,
    EXCERPT_SCAN,
    IGNORED_ENDPOINTS,
    JSON_STRING_PATTERN,
    LOG_SPACE,
    QUOTE_MARK,
    REQUEST_METHODS,
    WITNESSES_PER_KEY,
    GroupTally,
)
from opslake.analysis.reporters import INTERNAL_REPORTERS, ReporterTrust
from opslake.models.playbooks import MAX_EVIDENCE, MAX_TRACKED_AGENTS, EntryKind
from opslake.models.window import Window
from opslake.query.sqltext import sql_string, sql_string_list, window_predicate

#: ``/log`` groups: at most this many (approach, witness) pairs per group, the best-supported
#: approaches first (a group's approaches are ranked by reporters; one with more spellings than
#: this is a flood, not advice).
MAX_APPROACH_PAIRS = 2_000
_SEP = (
    "chr(10)"  # between a witness and an approach in one string (neither holds a newline... a witness never)
)


def _hash16(expr: str) -> str:
    return f"substr(lower(to_hex(sha256(to_utf8({expr})))), 1, 16)"


def _strip_sql(expr: str) -> str:
    """``expr`` without :data:`~.grouping.LOG_SPACE` at its ends, as ``str.strip(LOG_SPACE)`` (a
    one-argument ``trim`` strips only " " in DuckDB, all Unicode whitespace in Trino)."""
    chars = " || ".join(sql_string(c) if c == " " else f"chr({ord(c)})" for c in LOG_SPACE)
    return f"trim({expr}, {chars})"


def _lower_sql(expr: str) -> str:
    """``expr`` with A-Z lowered only, as :func:`~.grouping.ascii_lower`."""
    return f"translate({expr}, {sql_string(ASCII_UPPER)}, {sql_string(ASCII_UPPER.lower())})"


def _part(expr: str) -> str:
    """A group key part as :func:`~.grouping.group_key` writes it (missing or empty: ``-``)."""
    return f"coalesce(nullif({expr}, ''), '-')"


def witness_sql(trust: ReporterTrust, reporter: str = "reporter_id", agent: str = "agent_id") -> str:
    """What an op counts as (:meth:`ReporterTrust.witness`) for the rows that count: the key's
    name escaped, and for a runtime key ``/`` and the claimed agent."""
    escaped = f"replace(replace({reporter}, '%', '%25'), '/', '%2F')"
    named = {k: v for k, v in trust.levels.items() if k not in INTERNAL_REPORTERS}
    if trust.default == "runtime":
        others = [k for k, v in named.items() if v != "runtime"]
        runtime = f"{reporter} NOT IN ({sql_string_list(others)})" if others else "TRUE"
    else:
        keys = [k for k, v in named.items() if v == "runtime"]
        runtime = f"{reporter} IN ({sql_string_list(keys)})" if keys else "FALSE"
    return f"(CASE WHEN {runtime} THEN {escaped} || '/' || {agent} ELSE {escaped} END)"


def input_shape_sql(expr: str) -> str:
    """:func:`~.grouping.input_shape` of a varchar expression (never NULL)."""
    text = f"coalesce({expr}, '')"
    marked = (
        f"(CASE WHEN substr({text}, 1, 1) IN ('{{', '[') THEN regexp_replace({text}, "
        f"{sql_string(JSON_STRING_PATTERN)}, {sql_string(QUOTE_MARK + '$1' + QUOTE_MARK)}) ELSE {text} END)"
    )
    return f"replace({input_template_sql(marked)}, {sql_string(QUOTE_MARK)}, '\"')"


def success_template_sql(source: str) -> str:
    """A query over ``source`` (a subquery or table with ``input_summary``) that adds ``shape``:
    :func:`~.grouping.success_template` of each row. Nested selects so that each step is computed
    once per row (the masking expression is long)."""
    methods = sql_string_list(REQUEST_METHODS)
    split = """SELECT *, CASE WHEN strpos({s}, ' ') > 0 THEN substr({s}, 1, strpos({s}, ' ') - 1) ELSE {d} END AS {a},
       CASE WHEN strpos({s}, ' ') > 0 THEN substr({s}, strpos({s}, ' ') + 1) ELSE '' END AS {b}"""
    return f"""SELECT *, CASE WHEN is_request
         THEN head || CASE WHEN body_shape <> '' THEN ' ' || body_shape ELSE '' END
         ELSE body_shape END AS shape
FROM (
SELECT *, {input_shape_sql("shape_text")} AS body_shape
FROM (
SELECT *, CASE WHEN is_request THEN req_body ELSE shape_whole END AS shape_text,
       req_method || CASE WHEN query_keys <> '' THEN ' ?' || query_keys ELSE '' END AS head
FROM (
SELECT *, (req_method IN ({methods}) AND req_token <> '' AND NOT regexp_like(req_token, '[\\t\\n\\r\\x0B\\x0C]'))
            AS is_request,
       array_join(array_sort(array_distinct(regexp_extract_all(regexp_replace(req_query, '=[^&]*', ''),
            '[^&]+'))), '&') AS query_keys
FROM (
SELECT *, CASE WHEN strpos(req_token, '?') > 0 THEN substr(req_token, strpos(req_token, '?') + 1) ELSE '' END
            AS req_query
FROM (
{split.format(s="req_rest", d="req_rest", a="req_token", b="req_body")}
FROM (
{split.format(s="shape_whole", d="''", a="req_method", b="req_rest")}
FROM (SELECT *, coalesce(input_summary, '') AS shape_whole FROM ({source}) src) s1) s2) s3) s4) s5) s6) s7"""


def _tallies_sql(
    evidence: str, *, min_ops: int, min_agents: int, approaches: bool, same_head: bool = False
) -> str:
    """The aggregation both kinds share, over ``evidence`` (columns group_key, endpoint,
    task_class, kind, head, op_id, ts, agent_id, witness, text, approach): one scan, then per group
    only (the lists are bounded here), each list's element ``n`` on row ``n``. The witnesses are
    ranked apart from the other lists (joined back by group) so that the window functions move
    small rows; Trino computes ``g`` for each of its two readers (the window is scanned twice)."""
    order = "ROW(ts, op_id)"

    def first(column: str) -> str:
        """The group's first op's value; with ``same_head`` every op of a group has the same
        endpoint, task class, kind and head (its key says so), and any one will do."""
        return f"min({column})" if same_head else f"min_by({column}, {order})"

    pairs = (
        f"""array_agg(pair ORDER BY pair) FILTER (WHERE approach_rank <= {WITNESSES_PER_KEY}
            AND pair_rank <= {MAX_APPROACH_PAIRS}) AS pairs"""
        if approaches
        else "CAST(NULL AS array(varchar)) AS pairs"
    )
    return f"""WITH e AS (
{evidence}
), a AS (
  SELECT group_key, {first("endpoint")} AS endpoint, {first("task_class")} AS task_class, {first("kind")} AS kind,
         {first("head")} AS head, count(*) AS ops, sum(count(*)) OVER () AS evidence_ops,
         array_agg(DISTINCT agent_id) AS all_agents,
         max_by(op_id, {order}, {MAX_EVIDENCE}) AS op_ids,
         min_by(text, {order}, {EXCERPT_SCAN}) FILTER (WHERE text <> '') AS texts,
         array_agg(DISTINCT witness || {_SEP} || approach) AS witness_pairs
  FROM e
  GROUP BY group_key
), g AS (
  SELECT group_key, endpoint, task_class, kind, head, ops, evidence_ops, cardinality(all_agents) AS agent_count,
         slice(array_sort(all_agents), 1, {MAX_TRACKED_AGENTS}) AS agents, op_ids, texts, witness_pairs
  FROM a
), u AS (
  SELECT g.group_key, t.pair,
         substr(t.pair, 1, strpos(t.pair, {_SEP}) - 1) AS witness,
         substr(t.pair, strpos(t.pair, {_SEP}) + 1) AS approach
  FROM g CROSS JOIN UNNEST(g.witness_pairs) AS t(pair)
  WHERE g.ops >= {int(min_ops)} AND g.agent_count >= {int(min_agents)}
), r AS (
  SELECT *, split_part(witness, '/', 1) AS wkey,
         row_number() OVER (PARTITION BY group_key, approach, split_part(witness, '/', 1) ORDER BY witness)
           AS approach_rank,
         dense_rank() OVER (PARTITION BY group_key, split_part(witness, '/', 1) ORDER BY witness) AS key_rank,
         row_number() OVER (PARTITION BY group_key, witness ORDER BY approach) AS witness_row,
         count(*) OVER (PARTITION BY group_key, approach) AS approach_support
  FROM u
), r2 AS (
  SELECT *,
         dense_rank() OVER (PARTITION BY group_key
           ORDER BY CASE WHEN key_rank <= {WITNESSES_PER_KEY} THEN key_rank END ASC NULLS LAST, wkey) AS witness_pos,
         row_number() OVER (PARTITION BY group_key
           ORDER BY CASE WHEN approach_rank <= {WITNESSES_PER_KEY} THEN 0 ELSE 1 END, approach_support DESC,
                    length(approach), approach, witness) AS pair_rank
  FROM r
), w AS (
  SELECT group_key,
         array_agg(witness ORDER BY witness) FILTER (WHERE witness_row = 1 AND key_rank <= {WITNESSES_PER_KEY}
           AND witness_pos <= {MAX_TRACKED_AGENTS}) AS witnesses,
         {pairs}
  FROM r2
  GROUP BY group_key
), f AS (
  SELECT g.group_key, g.endpoint, g.task_class, g.kind, g.head, g.ops, g.agent_count, g.evidence_ops,
         g.agents, g.op_ids, g.texts, w.witnesses, w.pairs
  FROM g JOIN w ON w.group_key = g.group_key
)
SELECT group_key, endpoint, task_class, kind, head, ops, agent_count, evidence_ops, n,
       element_at(agents, n) AS agent, element_at(witnesses, n) AS witness, element_at(op_ids, n) AS op_id,
       element_at(texts, n) AS text, element_at(pairs, n) AS pair
FROM f CROSS JOIN UNNEST(sequence(1, greatest(coalesce(cardinality(agents), 0), coalesce(cardinality(witnesses), 0),
  coalesce(cardinality(op_ids), 0), coalesce(cardinality(texts), 0), coalesce(cardinality(pairs), 0), 1))) AS t(n)
ORDER BY group_key, n"""


def success_tallies_sql(
    table: str, window: Window, trust: ReporterTrust, *, min_successes: int, min_agents: int
) -> str:
    """The success groups of the window with at least ``min_successes`` ops from ``min_agents``
    claimed agents: by (endpoint, task class, call shape); ``/log`` records, opslake's own routes
    and keys ``trust`` does not count are left out."""
    where = f"""{window_predicate(window)} AND {trust.sql_predicate("reporter_id")} AND success
  AND coalesce(event_kind, '') <> 'log' AND endpoint NOT IN ({sql_string_list(IGNORED_ENDPOINTS)})"""
    # The shape of each distinct input, joined back: the masking (dozens of regexp_replace calls)
    # runs once per distinct input rather than once per op (a day of a million ops held 75,000).
    inputs = f"SELECT DISTINCT coalesce(input_summary, '') AS input_summary FROM {table} WHERE {where}"
    evidence = f"""SELECT 'successes|' || {_part("o.endpoint")} || '|' || {_part("o.task_class")} || '|'
         || sh.shape_hash AS group_key, o.endpoint, o.task_class, 'do' AS kind, sh.shape AS head,
       o.op_id, o.ts, o.agent_id, {witness_sql(trust, "o.reporter_id", "o.agent_id")} AS witness,
       coalesce(o.input_summary, '') AS text, '' AS approach
FROM (
  SELECT op_id, ts, agent_id, reporter_id, endpoint, task_class, input_summary FROM {table} WHERE {where}
) o
JOIN (SELECT shape_whole, shape, {_hash16("shape")} AS shape_hash FROM ({success_template_sql(inputs)}) shaped) sh
  ON coalesce(o.input_summary, '') = sh.shape_whole"""
    return _tallies_sql(
        evidence, min_ops=min_successes, min_agents=min_agents, approaches=False, same_head=True
    )


def log_records_sql(table: str, window: Window, trust: ReporterTrust) -> str:
    """The window's ``/log`` records (from keys that count), each part from its own place:
    operation, approach (``summary``), result and context; a record packed the old way
    (``log_format`` NULL) is unpacked as :class:`~.grouping.LogRow` does."""
    return f"""SELECT op_id, ts, agent_id, reporter_id, endpoint, task_class, success,
       CASE WHEN log_format IS NOT NULL THEN coalesce(op_attr, '') WHEN coalesce(op_attr, '') <> '' THEN op_attr
            ELSE packed_operation END AS operation,
       CASE WHEN log_format IS NOT NULL THEN input_summary
            WHEN coalesce(op_attr, '') <> ''
                 AND substr(packed, 1, length(op_attr) + 2) = op_attr || ': ' THEN substr(packed, length(op_attr) + 3)
            WHEN strpos(packed, ': ') > 0 THEN substr(packed, strpos(packed, ': ') + 2)
            ELSE CASE WHEN coalesce(op_attr, '') <> '' THEN op_attr ELSE packed_operation END END AS summary,
       CASE WHEN log_format IS NOT NULL THEN result_attr WHEN coalesce(result_attr, '') <> '' THEN result_attr
            WHEN strpos(packed_out, ':') > 0 THEN substr(packed_out, 1, strpos(packed_out, ':') - 1)
            ELSE packed_out END AS result,
       CASE WHEN log_format IS NOT NULL THEN output_summary
            WHEN strpos(packed_out, ':') > 0 THEN nullif({_strip_sql("substr(packed_out, strpos(packed_out, ':') + 1)")}, '')
            END AS context
FROM (
  SELECT *, CASE WHEN strpos(packed, ': ') > 0 THEN substr(packed, 1, strpos(packed, ': ') - 1) ELSE packed END
              AS packed_operation
  FROM (
    SELECT op_id, ts, agent_id, reporter_id, endpoint, task_class, success, input_summary, output_summary,
           element_at(attributes, 'operation') AS op_attr, element_at(attributes, 'result') AS result_attr,
           element_at(attributes, 'log_format') AS log_format,
           coalesce(input_summary, '') AS packed, coalesce(output_summary, '') AS packed_out
    FROM {table}
    WHERE {window_predicate(window)} AND {trust.sql_predicate("reporter_id")} AND event_kind = 'log'
  ) raw
) unpacked"""


def log_tallies_sql(
    table: str, window: Window, trust: ReporterTrust, *, min_records: int, min_agents: int
) -> str:
    """The ``/log`` groups of the window with at least ``min_records`` records from ``min_agents``
    claimed agents: by (endpoint, task class, do/avoid, normalized operation), with each
    approach's witnesses."""
    records = log_records_sql(table, window, trust)
    evidence = f"""SELECT 'log|' || {_part("endpoint")} || '|' || {_part("task_class")} || '|' || kind || '|'
         || {_hash16(_lower_sql("operation_shape"))} AS group_key,
       endpoint, task_class, kind, operation AS head, op_id, ts, agent_id, {witness_sql(trust)} AS witness,
       operation || ': ' || coalesce(summary, '') || ' → ' || outcome
         || CASE WHEN coalesce(context, '') <> '' THEN ': ' || context ELSE '' END AS text,
       {_strip_sql("coalesce(summary, '')")} AS approach
FROM (
  SELECT *, CASE WHEN success AND outcome <> 'failure' THEN 'do' ELSE 'avoid' END AS kind
  FROM (
    SELECT *, coalesce(nullif({_lower_sql(_strip_sql("coalesce(result, '')"))}, ''),
                       CASE WHEN success THEN 'success' ELSE 'failure' END) AS outcome,
              {normalize_sql("operation")} AS operation_shape
    FROM ({records}) records
  ) outcomes
) kinds
WHERE operation_shape <> ''"""
    return _tallies_sql(evidence, min_ops=min_records, min_agents=min_agents, approaches=True)


def tallies_from_rows(
    rows: Iterable[Mapping[str, Any]], source: Literal["successes", "log"]
) -> list[GroupTally]:
    """The tallies a :func:`success_tallies_sql` or :func:`log_tallies_sql` answer holds (rows in
    ``(group_key, n)`` order; each list's element ``n`` on row ``n``)."""
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[row["group_key"]].append(row)
    tallies = []
    for key, members in groups.items():
        members.sort(key=lambda r: int(r["n"]))
        first = members[0]

        def column(name: str, members: list[Mapping[str, Any]] = members) -> list[str]:
            return [r[name] for r in members if r[name] is not None]

        per_approach: dict[str, list[str]] = defaultdict(list)
        for pair in column("pair"):
            witness, _, approach = pair.partition("\n")
            per_approach[approach].append(witness)
        kind: EntryKind = "avoid" if first["kind"] == "avoid" else "do"
        tallies.append(
            GroupTally(
                group_key=key, source=source, kind=kind, endpoint=first["endpoint"],
                task_class=first["task_class"], head=first["head"] or "", count=int(first["ops"]),
                agent_count=int(first["agent_count"]), agents=tuple(column("agent")),
                witnesses=tuple(column("witness")), op_ids=tuple(reversed(column("op_id"))),
                texts=tuple(column("text")),
                approach_witnesses=tuple((a, tuple(sorted(ws))) for a, ws in sorted(per_approach.items())),
            )
        )  # fmt: skip
    return sorted(tallies, key=lambda t: t.group_key)


def evidence_ops(rows: Iterable[Mapping[str, Any]]) -> int:
    """How many ops the tally query counted as evidence (in every group, enough or not); 0 when
    no group had enough."""
    return next((int(r["evidence_ops"]) for r in rows), 0)
