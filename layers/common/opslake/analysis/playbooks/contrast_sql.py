"""The contrast's samples, picked by the engine: for each repeated failure signature, its newest
failing ops beside the newest successful ops of the same endpoint and task class, one row per op.

:func:`contrast_samples_sql` (Athena SQL; the embedded engine runs it on DuckDB through the
dialect layer) is what :func:`~.contrast.contrast_groups` reads. Rows are bounded by groups, not by
ops: at most :data:`MAX_CONTRAST_GROUPS` failure groups, :data:`FAILURES_PER_GROUP` failing ops
each and :data:`SUCCESSES_PER_CLASS` successes per (endpoint, task class) among them.

A failure the runtime reported about a tool's answer (``result_truncated``: its input is the
question the agent was answering, not a request) carries ``linked_input``: the input of the latest
gateway op on the same endpoint, key and session at or before it, i.e. the call the runtime judged.
Every sampled op carries ``earlier_ok``: the other calls that answered the same key's session
successfully before it ("METHOD /route" for a gateway or MCP call, else the endpoint: where the ids
an agent used came from, what it looked up first), and a sampled failure ``next_ok_input``: the input
of the next successful call of the same endpoint in that session (how the agent recovered).
"""

from __future__ import annotations

from opslake.analysis.masking import signature_id_sql, template_sql
from opslake.analysis.playbooks.grouping import IGNORED_ENDPOINTS
from opslake.analysis.reporters import ReporterTrust
from opslake.analysis.template_merge import merged_signature_sql
from opslake.models.window import Window
from opslake.query.sqltext import sql_string_list, window_predicate

MAX_CONTRAST_GROUPS = 50  # failure groups (endpoint, task class, signature), the most failures first
FAILURES_PER_GROUP = 20
SUCCESSES_PER_CLASS = 50
#: At most this many of a class's sampled successes come from one key, newest first: one key
#: flooding a class with its own successes cannot be all that "the successes do".
SUCCESSES_PER_REPORTER = 10
MAX_ERROR_CHARS = 500
MAX_INPUT_CHARS = 2000
#: The span attribute of a model call's prompt size (OpenTelemetry GenAI semantic conventions).
INPUT_TOKENS_ATTRIBUTE = "gen_ai.usage.input_tokens"
#: Records that are no call of their own: an agent's /log report, the runtime's retry, an overseer's correction.
NOT_CALLS = ("log", "rescue", "correction")


#: A claimed agent as a group's evidence counts it: per key (one agent name that two keys' runtimes
#: run is two runs of it; one key claiming many names is still many claims, as before).
AGENT_RUN = "coalesce(reporter_id, '') || '/' || coalesce(agent_id, '')"


def calls_only(alias: str = "") -> str:
    """The records that are calls of their own (SQL predicate): not an agent's /log report, not the
    runtime's report of a retry (the retry is a call of its own), not an overseer's correction (a
    claim about a call, recorded as a success on its endpoint)."""
    p = f"{alias}." if alias else ""
    return (
        f"coalesce({p}event_kind, '') NOT IN ({sql_string_list(NOT_CALLS)}) "
        f"AND coalesce({p}source, '') <> 'overseer_correction'"
    )


def signature_of_failure(alias: str = "", *, merged: bool = True) -> str:
    """A failed op's signature computed from the op itself as the analyzer computes it (masking in
    SQL), then looked up in the analyzer's ``signature_merges`` (a word variant counts under its
    merged signature): no join with ``failures``, and a failure the analyzer has not seen yet has
    one already (its raw signature, until the analyzer merges it). With ``merged=False`` the raw
    signature only: a query over many ops computes it in a subquery and looks the column up one
    level up (:func:`~opslake.analysis.template_merge.merged_signature_sql`), since the lookup names
    its argument twice and the masking is the costly part."""
    p = f"{alias}." if alias else ""
    raw = signature_id_sql(template_sql(f"{p}endpoint", f"{p}error_type", f"{p}error"))
    return f"CASE WHEN NOT {p}success THEN {merged_signature_sql(raw) if merged else raw} END"


def contrast_samples_sql(
    table: str, window: Window, trust: ReporterTrust, *, min_failures: int, min_agents: int
) -> str:
    """One row per sampled op (column ``side``: ``failure`` or ``success``) of the window's failure
    groups with at least ``min_failures`` failures from ``min_agents`` claimed agents (counted per
    key: :data:`AGENT_RUN`).

    * failing side: (endpoint, task class, signature) groups of the ops of keys ``trust`` counts,
      without /log records, retries, corrections and opslake's own routes; the newest
      :data:`FAILURES_PER_GROUP` of each group;
    * successful side: the newest :data:`SUCCESSES_PER_CLASS` successful gateway ops of each
      (endpoint, task class) above, at most :data:`SUCCESSES_PER_REPORTER` of them from one key,
      without answers cut at a row limit (``… (truncated)``); for an
      endpoint that is no route (``runtime:model_call``) the runtime's successful ops, retries
      included (the retry with a smaller prompt is the success there).

    Columns: side, endpoint, task_class, signature_id, failures, op_id, ts, agent_id, reporter_id,
    session_id, source, error_type, error (first 500 characters), input_summary (first 2000),
    linked_input, linked_op_id, earlier_ok (comma-separated "METHOD endpoint" or endpoint), input_tokens,
    next_ok_input.
    """
    calls = f"""{window_predicate(window)} AND {trust.sql_predicate("reporter_id")}
    AND endpoint NOT IN ({sql_string_list(IGNORED_ENDPOINTS)})"""
    return f"""WITH base AS (
  SELECT op_id, ts, agent_id, reporter_id, coalesce(session_id, trace_id) AS session_id, endpoint,
         coalesce(task_class, '') AS task_class, success,
         source, coalesce(event_kind, '') AS event_kind, error_type, substr(error, 1, {MAX_ERROR_CHARS}) AS error,
         substr(input_summary, 1, {MAX_INPUT_CHARS}) AS input_summary, coalesce(output_summary, '') AS output_summary,
         element_at(attributes, '{INPUT_TOKENS_ATTRIBUTE}') AS input_tokens, {calls_only()} AS is_call
  FROM {table}
  WHERE {calls} AND coalesce(source, '') <> 'overseer_correction'
), f AS (
  SELECT *, {signature_of_failure()} AS signature_id
  FROM base
  WHERE NOT success AND {calls_only()}
), fg AS (
  SELECT endpoint, task_class, signature_id, count(*) AS failures,
         row_number() OVER (ORDER BY count(*) DESC, endpoint, task_class, signature_id) AS group_rank
  FROM f
  GROUP BY endpoint, task_class, signature_id
  HAVING count(*) >= {int(min_failures)} AND count(DISTINCT {AGENT_RUN}) >= {int(min_agents)}
), fs AS (
  SELECT f.*, fg.failures,
         row_number() OVER (PARTITION BY f.endpoint, f.task_class, f.signature_id ORDER BY f.ts DESC, f.op_id) AS pick
  FROM f JOIN fg ON f.endpoint = fg.endpoint AND f.task_class = fg.task_class AND f.signature_id = fg.signature_id
  WHERE fg.group_rank <= {MAX_CONTRAST_GROUPS}
), classes AS (
  SELECT DISTINCT endpoint, task_class FROM fg WHERE group_rank <= {MAX_CONTRAST_GROUPS}
), sk AS (
  SELECT b.*, row_number() OVER (PARTITION BY b.endpoint, b.task_class, b.reporter_id ORDER BY b.ts DESC, b.op_id)
           AS key_pick
  FROM base b JOIN classes c ON b.endpoint = c.endpoint AND b.task_class = c.task_class
  WHERE b.success AND b.output_summary NOT LIKE '% (truncated)'
    AND (b.source = 'gateway' OR (substr(b.endpoint, 1, 1) <> '/' AND b.event_kind NOT IN ('log', 'correction')))
), ss AS (
  SELECT op_id, ts, agent_id, reporter_id, session_id, endpoint, task_class, success, source, event_kind,
         error_type, error, input_summary, output_summary, input_tokens,
         CAST(NULL AS varchar) AS signature_id, CAST(NULL AS bigint) AS failures,
         row_number() OVER (PARTITION BY endpoint, task_class ORDER BY ts DESC, op_id) AS pick
  FROM sk WHERE key_pick <= {SUCCESSES_PER_REPORTER}
), sampled AS (
  SELECT 'failure' AS side, op_id, ts, agent_id, reporter_id, session_id, endpoint, task_class, source, error_type,
         error, input_summary, input_tokens, signature_id, failures
  FROM fs WHERE pick <= {FAILURES_PER_GROUP}
  UNION ALL
  SELECT 'success' AS side, op_id, ts, agent_id, reporter_id, session_id, endpoint, task_class, source, error_type,
         error, input_summary, input_tokens, signature_id, failures
  FROM ss WHERE pick <= {SUCCESSES_PER_CLASS}
), history AS (
  SELECT s.side, s.op_id, s.reporter_id,
         max_by(g.input_summary, ROW(g.ts, g.op_id))
           FILTER (WHERE g.endpoint = s.endpoint AND g.source = 'gateway' AND g.ts <= s.ts) AS linked_input,
         max_by(g.op_id, ROW(g.ts, g.op_id))
           FILTER (WHERE g.endpoint = s.endpoint AND g.source = 'gateway' AND g.ts <= s.ts) AS linked_op_id,
         array_join(array_sort(array_agg(DISTINCT
             coalesce(CASE WHEN g.source IN ('gateway', 'mcp') THEN split_part(g.input_summary, ' ', 1) || ' ' END, '')
             || g.endpoint)
           FILTER (WHERE g.success AND g.ts < s.ts AND g.endpoint <> s.endpoint AND g.is_call
                   AND substr(g.endpoint, 1, 6) <> 'agent:')), ',') AS earlier_ok,
         min_by(g.input_summary, ROW(g.ts, g.op_id))
           FILTER (WHERE g.success AND g.ts > s.ts AND g.endpoint = s.endpoint AND g.is_call) AS next_ok_input
  FROM sampled s JOIN base g
    ON g.reporter_id = s.reporter_id AND g.session_id = s.session_id AND g.op_id <> s.op_id
  GROUP BY s.side, s.op_id, s.reporter_id
)
SELECT s.side, s.endpoint, nullif(s.task_class, '') AS task_class, s.signature_id, s.failures, s.op_id, s.ts,
       s.agent_id, s.reporter_id, s.session_id, s.source, s.error_type, s.error, s.input_summary,
       CASE WHEN s.side = 'failure' AND s.source <> 'gateway' THEN h.linked_input END AS linked_input,
       CASE WHEN s.side = 'failure' AND s.source <> 'gateway' THEN h.linked_op_id END AS linked_op_id,
       coalesce(h.earlier_ok, '') AS earlier_ok, s.input_tokens,
       CASE WHEN s.side = 'failure' THEN h.next_ok_input END AS next_ok_input
FROM sampled s LEFT JOIN history h ON h.side = s.side AND h.op_id = s.op_id AND h.reporter_id = s.reporter_id
ORDER BY s.endpoint, s.task_class, s.side, s.signature_id, s.ts DESC, s.op_id"""
