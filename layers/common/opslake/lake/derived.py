"""The tables the scheduled jobs derive from ``ops``: signatures, diagnoses, playbooks, the tool catalog.

Each is Parquet under ``derived/<table>/`` in the lake bucket and a Glue table of the same name
(template.yaml declares the columns; an infrastructure test asserts they equal these schemas).
Every object name is a function of *what* it holds, never of *when* it was written, so a rerun
after a crash overwrites instead of duplicating. (``failures``, one row per failed op with its
signature, is a Glue view over ``ops`` that the analyzer keeps: :func:`opslake.jobs.analyzer.failures_view_sql`.)

* ``signatures``, ``playbooks`` and ``tool_catalog``: one object each, the whole table, rewritten
  after each run.
* ``signature_merges``: one object, the analyzer's word-variant merges, rewritten after each run.
* ``diagnoses``: one object per diagnosis, named by its id (``dg_<signature>_<n>``).
* ``playbook_deltas``: one object per consolidator run (named by the run's window end and its
  delta ids) or per operator change (named by its delta id).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from opslake.lake.parquet import to_parquet_bytes
from opslake.lake.schema import glue_columns

DERIVED_PREFIX = "derived/"
_TS = pa.timestamp("ms", tz="UTC")
_IDS = pa.list_(pa.string())

SIGNATURES_SCHEMA = pa.schema(
    [
        pa.field("signature_id", pa.string(), nullable=False),
        pa.field("endpoint", pa.string(), nullable=False),
        pa.field("error_type", pa.string()),
        pa.field("template", pa.string(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),
        pa.field("agent_count", pa.int64(), nullable=False),
        pa.field("reporter_count", pa.int64()),
        pa.field("variant_count", pa.int64(), nullable=False),
        pa.field("first_seen", _TS, nullable=False),
        pa.field("last_seen", _TS, nullable=False),
        pa.field("sample_op_ids", _IDS),
        pa.field("diagnoses", pa.int64(), nullable=False),
        pa.field("last_diagnosis_id", pa.string()),
        pa.field("last_diagnosed_at", _TS),
    ]
)

#: One row per raw signature folded into a merged one (word variants: opslake.analysis.template_merge):
#: what every SQL that computes a signature looks its raw id up in.
SIGNATURE_MERGES_SCHEMA = pa.schema(
    [
        pa.field("raw_signature_id", pa.string(), nullable=False),
        pa.field("signature_id", pa.string(), nullable=False),
        pa.field("template", pa.string(), nullable=False),
        pa.field("raw_template", pa.string(), nullable=False),
    ]
)

DIAGNOSES_SCHEMA = pa.schema(
    [
        pa.field("diagnosis_id", pa.string(), nullable=False),
        pa.field("signature_id", pa.string(), nullable=False),
        pa.field("endpoint", pa.string(), nullable=False),
        pa.field("template", pa.string(), nullable=False),
        pa.field("cause", pa.string(), nullable=False),
        pa.field("agent_adjustment", pa.string(), nullable=False),
        pa.field("avoid", pa.bool_(), nullable=False),
        pa.field("category", pa.string(), nullable=False),
        pa.field("confidence", pa.float64(), nullable=False),
        pa.field("diagnosed_by", pa.string(), nullable=False),
        pa.field("failure_count", pa.int64(), nullable=False),
        pa.field("agent_count", pa.int64(), nullable=False),
        pa.field("reporter_count", pa.int64()),
        pa.field("reporters", _IDS),
        pa.field("evidence_op_ids", _IDS),
        pa.field("created_at", _TS, nullable=False),
    ]
)

PLAYBOOKS_SCHEMA = pa.schema(
    [
        pa.field("entry_id", pa.string(), nullable=False),
        pa.field("trigger", pa.string(), nullable=False),
        pa.field("action", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("domain", pa.string()),
        pa.field("scope", pa.string()),
        pa.field("endpoint", pa.string()),
        pa.field("task_class", pa.string()),
        pa.field("signature_id", pa.string()),
        pa.field("status", pa.string(), nullable=False),
        pa.field("confidence", pa.float64(), nullable=False),
        pa.field("evidence_op_ids", _IDS),
        pa.field("evidence_agent_count", pa.int64()),
        pa.field("evidence_reporter_count", pa.int64()),
        pa.field("evidence_reporters", _IDS),
        pa.field("created_at", _TS, nullable=False),
        pa.field("published_at", _TS),
        pa.field("approved_at", _TS),
        pa.field("fence_override_reason", pa.string()),
        pa.field("retired_at", _TS),
        pa.field("retired_reason", pa.string()),
        pa.field("merged_into", pa.string()),
        pa.field("instead_of", pa.string()),
        pa.field("fix_kind", pa.string()),
        pa.field("fix_names", _IDS),
        pa.field("fix_failures", pa.int64()),
        pa.field("fix_successes", pa.int64()),
        pa.field("revision", pa.int64()),
        pa.field("experiment_stage", pa.string()),
        pa.field("holdout_share", pa.float64()),
        pa.field("experiment_started_at", _TS),
        pa.field("graduated_at", _TS),
        pa.field("treatment_units", pa.int64()),
        pa.field("holdout_units", pa.int64()),
        pa.field("treatment_ops", pa.int64()),
        pa.field("treatment_failures", pa.int64()),
        pa.field("holdout_ops", pa.int64()),
        pa.field("holdout_failures", pa.int64()),
        pa.field("treatment_sig_failures", pa.int64()),
        pa.field("holdout_sig_failures", pa.int64()),
        pa.field("treatment_rate", pa.float64()),
        pa.field("treatment_rate_low", pa.float64()),
        pa.field("treatment_rate_high", pa.float64()),
        pa.field("holdout_rate", pa.float64()),
        pa.field("holdout_rate_low", pa.float64()),
        pa.field("holdout_rate_high", pa.float64()),
        pa.field("effect", pa.float64()),
        pa.field("effect_low", pa.float64()),
        pa.field("effect_high", pa.float64()),
        pa.field("design_effect", pa.float64()),
        pa.field("helpful_count", pa.int64()),
        pa.field("harmful_count", pa.int64()),
        pa.field("neutral_count", pa.int64()),
        pa.field("helpful_streak", pa.int64()),
        pa.field("last_verdict", pa.string()),
        pa.field("judged_at", _TS),
        pa.field("followed_treatment", pa.int64()),
        pa.field("followed_holdout", pa.int64()),
    ]
)

#: One row per recorded edit of an entry (:mod:`opslake.analysis.playbooks.deltas`): add, update,
#: merge, deprecate, publish, withhold, approve, graduate. Entries change by these only.
PLAYBOOK_DELTAS_SCHEMA = pa.schema(
    [
        pa.field("delta_id", pa.string(), nullable=False),
        pa.field("entry_id", pa.string(), nullable=False),
        pa.field("revision", pa.int64(), nullable=False),
        pa.field("op", pa.string(), nullable=False),
        pa.field("at", _TS, nullable=False),
        pa.field("by", pa.string(), nullable=False),
        pa.field("reason", pa.string()),
        pa.field("changes_json", pa.string()),
        pa.field("merged_into", pa.string()),
        pa.field("run_window_end", _TS),
    ]
)

#: The tool catalog (:mod:`opslake.analysis.catalog`): one row per tool, argument, argument shape,
#: error template and preceding tool (``item``), replaced whole by each consolidator run.
TOOL_CATALOG_SCHEMA = pa.schema(
    [
        pa.field("endpoint", pa.string(), nullable=False),
        pa.field("item", pa.string(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("shape", pa.string()),
        pa.field("detail", pa.string()),
        pa.field("calls", pa.int64()),
        pa.field("failures", pa.int64()),
        pa.field("reporters", pa.int64()),
        pa.field("declared", pa.bool_()),
        pa.field("known", pa.bool_()),
        pa.field("first_seen", _TS),
        pa.field("last_seen", _TS),
        pa.field("updated_at", _TS, nullable=False),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "signatures": SIGNATURES_SCHEMA,
    "signature_merges": SIGNATURE_MERGES_SCHEMA,
    "diagnoses": DIAGNOSES_SCHEMA,
    "playbooks": PLAYBOOKS_SCHEMA,
    "playbook_deltas": PLAYBOOK_DELTAS_SCHEMA,
    "tool_catalog": TOOL_CATALOG_SCHEMA,
}
PARTITIONED: frozenset[str] = frozenset()  # none since failures became a view


def table_prefix(table: str) -> str:
    """``derived/<table>/``: the Glue table's location in the lake bucket."""
    return f"{DERIVED_PREFIX}{table}/"


def whole_table_key(table: str) -> str:
    return f"{table_prefix(table)}{table}.parquet"


def diagnosis_key(diagnosis_id: str) -> str:
    return f"{table_prefix('diagnoses')}{diagnosis_id}.parquet"


def run_deltas_key(base_committed_at: datetime | None) -> str:
    """One consolidator run's deltas, named by the committed state the run started from (its
    ``committed_at``; ``initial`` before any commit). A run redone after a crash before its commit
    starts from the same state, so it overwrites the crashed run's object, whose edits never
    happened: no delta is recorded twice even when the redone window ends later (a name by window
    end and content kept both). Committed runs start from distinct states, so never share a name."""
    base = "initial" if base_committed_at is None else f"{base_committed_at.astimezone(UTC):%Y%m%dT%H%M%S%f}"
    return f"{table_prefix('playbook_deltas')}run-{base}.parquet"


def delta_key(delta_id: str) -> str:
    """An operator's change (approve, retire): one object per delta, named by its id."""
    return f"{table_prefix('playbook_deltas')}{delta_id}.parquet"


def derived_glue_columns(table: str) -> list[dict[str, str]]:
    return glue_columns(SCHEMAS[table])


def to_table(table: str, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Rows (dicts, extra keys ignored) as an Arrow table of ``table``'s schema."""
    schema = SCHEMAS[table]
    return pa.Table.from_pylist(
        [{name: row.get(name) for name in schema.names} for row in rows], schema=schema
    )


def parquet_bytes(table: str, rows: Sequence[Mapping[str, Any]]) -> bytes:
    return to_parquet_bytes(to_table(table, rows))


def read_rows(data: bytes) -> list[dict[str, Any]]:
    """Rows of one derived object (for the jobs that keep a whole table in one object)."""
    import pyarrow.parquet as pq

    return list(pq.read_table(pa.BufferReader(data)).to_pylist())
