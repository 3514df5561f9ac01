"""The catalog's window, tallied by the engine: one row per tool, argument, argument shape and
preceding tool of the window's calls (Athena SQL; the embedded engine runs it on DuckDB through the
dialect layer), so the consolidator holds rows per distinct item, never per op.

A call's arguments (:func:`opslake.analysis.catalog.arguments.call_arguments` is the Python twin,
used on the contrast's samples) are:

* the top-level keys of its input when that is a JSON object (a tool call's
  ``gen_ai.tool.call.arguments``, OpenInference ``input.value``, an ``/events`` op's input);
* for a gateway request ("METHOD /path?query body", how the gateway records a call): the body's
  top-level keys, the query's keys and the route's path parameters (``/worker/{id}`` → ``id``).

Witnesses are counted as :mod:`opslake.analysis.reporters` says; a runtime key counts its first
:data:`~opslake.analysis.reporters.RUNTIME_MAX_REPORTERS` claimed agents (alphabetically) in the
window. Calls are what the experiment and the contrasts call calls
(:func:`~opslake.analysis.playbooks.contrast_sql.calls_only`), without opslake's own routes about
itself and without ``agent:`` spans (an agent run is no tool call).
"""

from __future__ import annotations

from opslake.analysis.catalog.shapes import value_shape_sql
from opslake.analysis.playbooks.contrast_sql import calls_only
from opslake.analysis.playbooks.evidence_sql import witness_sql
from opslake.analysis.playbooks.grouping import IGNORED_ENDPOINTS, REQUEST_METHODS
from opslake.analysis.reporters import RUNTIME_MAX_REPORTERS, ReporterTrust
from opslake.models.catalog import MAX_ARGUMENTS, MAX_PREDECESSORS, MAX_SHAPES, MAX_WITNESSES
from opslake.models.window import Window
from opslake.query.sqltext import sql_string_list, window_predicate

#: Kinds of rows :func:`catalog_window_sql` answers.
ROW_KINDS = ("tool", "argument", "shape", "preceded_by")
#: Sources only opslake's own API writes (a client cannot claim them): an endpoint they record is a
#: route that exists, whoever called it.
SERVER_SOURCES = ("gateway", "mcp")
#: Endpoints of agent runs, not tool calls.
AGENT_PREFIX = "agent:"
#: Rows of one window's answer at most, whatever it holds (tools first: :func:`catalog_window_sql`).
MAX_WINDOW_ROWS = 50_000
#: Arguments of one tool a window reports, the most called first (the catalog keeps
#: :data:`~opslake.models.catalog.MAX_ARGUMENTS` of them over all windows).
WINDOW_ARGUMENTS = 2 * MAX_ARGUMENTS


def _witnesses(expr: str = "w") -> str:
    """JSON text of an item's distinct witnesses (at most :data:`MAX_WITNESSES`)."""
    return (
        f"json_format(CAST(slice(array_sort(array_agg(DISTINCT {expr}) FILTER (WHERE {expr} IS NOT NULL)), "
        f"1, {MAX_WITNESSES}) AS JSON))"
    )


def catalog_window_sql(table: str, window: Window, trust: ReporterTrust) -> str:
    """One row per item of the window's calls from keys ``trust`` counts (columns: ``kind``,
    ``endpoint``, ``name`` (argument or preceding tool), ``shape``, ``calls``, ``failures``,
    ``distinct_shapes``, ``witnesses`` (JSON text), ``first_seen``, ``last_seen``, ``by_server``:
    the API recorded the tool's calls itself, so it is one of opslake's routes)."""
    methods = "|".join(REQUEST_METHODS)
    return f"""WITH witnessed AS (
  SELECT op_id, reporter_id, endpoint, ts, success, coalesce(input_summary, '') AS input,
         coalesce(source, '') IN ({sql_string_list(SERVER_SOURCES)}) AS by_server,
         coalesce(session_id, trace_id) AS session, {witness_sql(trust)} AS witness
  FROM {table}
  WHERE {window_predicate(window)} AND {trust.sql_predicate("reporter_id")} AND {calls_only()}
    AND endpoint NOT IN ({sql_string_list(IGNORED_ENDPOINTS)})
    AND substr(endpoint, 1, {len(AGENT_PREFIX)}) <> '{AGENT_PREFIX}'
), calls AS (
  -- a key's first witnesses count (a reporter key has one; a runtime key one per claimed agent)
  SELECT *, CASE WHEN dense_rank() OVER (PARTITION BY reporter_id ORDER BY witness) <= {RUNTIME_MAX_REPORTERS}
                 THEN witness END AS w
  FROM witnessed
), requests AS (
  SELECT *, regexp_like(input, '^({methods}) /') AS is_request,
         CASE WHEN strpos(input, ' ') > 0 THEN substr(input, strpos(input, ' ') + 1) ELSE '' END AS rest
  FROM calls
), parts AS (
  SELECT *,
         CASE WHEN NOT is_request THEN ''
              WHEN strpos(rest, ' ') > 0 THEN substr(rest, 1, strpos(rest, ' ') - 1) ELSE rest END AS target,
         CASE WHEN NOT is_request THEN input
              WHEN strpos(rest, ' ') > 0 THEN substr(rest, strpos(rest, ' ') + 1) ELSE '' END AS body
  FROM requests
), objects AS (
  SELECT *, try(CAST(json_parse(body) AS map(varchar, json))) AS m,
         CASE WHEN strpos(target, '?') > 0 THEN substr(target, strpos(target, '?') + 1) ELSE '' END AS query,
         CASE WHEN strpos(target, '?') > 0 THEN substr(target, 1, strpos(target, '?') - 1) ELSE target END AS path
  FROM parts
), kv AS (
  SELECT o.endpoint, o.op_id, o.success, o.w, k.arg,
         json_format(element_at(o.m, k.arg)) AS raw, json_extract_scalar(element_at(o.m, k.arg), '$') AS text
  FROM objects o CROSS JOIN UNNEST(map_keys(o.m)) AS k(arg)
  WHERE substr(ltrim(o.body), 1, 1) = '{{'
  UNION ALL
  SELECT o.endpoint, o.op_id, o.success, o.w, split_part(q.pair, '=', 1) AS arg,
         '"' AS raw, split_part(q.pair, '=', 2) AS text
  FROM objects o CROSS JOIN UNNEST(split(o.query, '&')) AS q(pair)
  WHERE o.query <> '' AND split_part(q.pair, '=', 1) <> ''
  UNION ALL
  SELECT o.endpoint, o.op_id, o.success, o.w, substr(p.seg, 2, length(p.seg) - 2) AS arg,
         '"' AS raw, element_at(split(o.path, '/'), p.pos) AS text
  FROM objects o CROSS JOIN UNNEST(split(o.endpoint, '/')) WITH ORDINALITY AS p(seg, pos)
  WHERE o.is_request AND substr(o.endpoint, 1, 1) = '/' AND substr(p.seg, 1, 1) = '{{'
    AND cardinality(split(o.path, '/')) = cardinality(split(o.endpoint, '/'))
), shaped AS (
  SELECT endpoint, op_id, success, w, arg, {value_shape_sql("raw", "text")} AS shape FROM kv
  WHERE length(arg) <= 200
), shapes AS (
  SELECT endpoint, arg, shape, count(*) AS calls, count_if(NOT success) AS failures, {_witnesses()} AS witnesses,
         row_number() OVER (PARTITION BY endpoint, arg ORDER BY count(*) DESC, shape) AS pick,
         count(*) OVER (PARTITION BY endpoint, arg) AS distinct_shapes
  FROM shaped GROUP BY endpoint, arg, shape
), arguments AS (
  SELECT endpoint, arg, count(*) AS calls, count_if(NOT success) AS failures, {_witnesses()} AS witnesses,
         row_number() OVER (PARTITION BY endpoint ORDER BY count(*) DESC, arg) AS pick
  FROM shaped GROUP BY endpoint, arg
), firsts AS (
  SELECT reporter_id, session, endpoint, min(ts) AS first_ts
  FROM calls WHERE session IS NOT NULL GROUP BY reporter_id, session, endpoint
), preceded AS (
  SELECT c.endpoint, f.endpoint AS before, count(*) AS calls, count_if(NOT c.success) AS failures,
         {_witnesses("c.w")} AS witnesses,
         row_number() OVER (PARTITION BY c.endpoint ORDER BY count(*) DESC, f.endpoint) AS pick
  FROM calls c JOIN firsts f
    ON f.reporter_id = c.reporter_id AND f.session = c.session AND f.first_ts < c.ts AND f.endpoint <> c.endpoint
  GROUP BY c.endpoint, f.endpoint
)
SELECT * FROM (
SELECT 'tool' AS kind, endpoint, CAST(NULL AS varchar) AS name, CAST(NULL AS varchar) AS shape, count(*) AS calls,
       count_if(NOT success) AS failures, CAST(NULL AS bigint) AS distinct_shapes, {_witnesses()} AS witnesses,
       min(ts) AS first_seen, max(ts) AS last_seen, bool_or(by_server) AS by_server
FROM calls GROUP BY endpoint
UNION ALL
SELECT 'argument', endpoint, arg, NULL, calls, failures, NULL, witnesses, NULL, NULL, NULL
FROM arguments WHERE pick <= {WINDOW_ARGUMENTS}
UNION ALL
SELECT 'shape', s.endpoint, s.arg, s.shape, s.calls, s.failures, s.distinct_shapes, s.witnesses, NULL, NULL, NULL
FROM shapes s JOIN arguments a ON a.endpoint = s.endpoint AND a.arg = s.arg
WHERE s.pick <= {MAX_SHAPES} AND a.pick <= {WINDOW_ARGUMENTS}
UNION ALL
SELECT 'preceded_by', endpoint, before, NULL, calls, failures, NULL, witnesses, NULL, NULL, NULL
FROM preceded WHERE pick <= {MAX_PREDECESSORS}
) AS items
-- tools first, then what says most about them: a window past the bound loses the rarest items
ORDER BY CASE kind WHEN 'tool' THEN 0 WHEN 'preceded_by' THEN 1 WHEN 'argument' THEN 2 ELSE 3 END, calls DESC,
         endpoint, name, shape
LIMIT {MAX_WINDOW_ROWS}"""


def signatures_sql() -> str:
    """The analyzer's signatures (the error templates of each endpoint), the most frequent first."""
    return (
        "SELECT signature_id, endpoint, template, count, coalesce(reporter_count, 0) AS reporter_count "
        "FROM signatures ORDER BY count DESC, signature_id LIMIT 20000"
    )
