"""The failure analyzer: new failures → signatures → bounded, validated diagnoses.

One run (every 5 minutes, or a backfill) does, in this order:

1. take the lease on ``state/analyzer.json`` (two overlapping runs: one of them does nothing);
2. aggregate the failed ops of the window ``[watermark, now − settle)`` in the engine, pruned on
   ``dt``/``hour``: the SQL masks each error (:mod:`opslake.analysis.masking`) and groups by
   template, so the Lambda receives one row per template (count, first/last seen, bounded and
   sorted lists of agents, reporters, variants and op ids) and at most five samples per
   template, however many ops failed; an op is counted once per (``reporter_id``, ``op_id``);
3. merge templates that differ only in a few word positions (a city, a role) into one signature
   (:func:`~opslake.analysis.signatures.merge_variants`: over the distinct templates, known and
   new, never over ops), then merge the aggregates into the signatures; the ``failures`` table is a
   Glue view over ``ops`` (:func:`failures_view_sql`) that computes every failure's signature with
   the same SQL and looks it up in ``signature_merges``, created or updated by each run when its
   text differs (nothing per op is written);
4. diagnose the signatures that are new or changed, at most ``diagnosis_budget`` of them, most
   frequent first, each diagnosis an object named by its id (a redo overwrites it);
5. commit the new watermark and the signatures with one conditional write. Until that write,
   nothing is counted: a crash anywhere before it makes the next run redo the same window;
6. export the ``signatures`` and ``signature_merges`` tables (one object each, replaced whole).

The diagnosis model's calls become op records (``source`` "llm") on the ops queue, so their
cost and errors land in the lake like any other op.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from opslake.analysis.catalog.known import Vocabulary, vocabulary_of
from opslake.analysis.diagnoser import Diagnoser
from opslake.analysis.masking import normalize_endpoint_sql, signature_id_sql, template_sql, variant_sql
from opslake.analysis.reporters import (
    ANALYZER_REPORTER,
    INTERNAL_REPORTERS,
    RUNTIME_MAX_REPORTERS,
    ReporterTrust,
)
from opslake.analysis.signatures import (
    MAX_VARIANTS,
    MergedRaw,
    NewTemplate,
    mark_diagnosed,
    merge_aggregate,
    merge_variants,
    merged_id,
    needs_diagnosis,
    select_for_diagnosis,
)
from opslake.analysis.template_merge import MERGES_TABLE
from opslake.config import Settings
from opslake.jobs.base import JobReport, ScheduledJob, wire
from opslake.jobs.lease import Lease, StateStore
from opslake.jobs.trigger import Backfill
from opslake.lake import derived
from opslake.lake.store import ObjectStore
from opslake.llm.records import settle_llm_calls
from opslake.models.analysis import (
    MAX_SAMPLE_OP_IDS,
    MAX_TRACKED_AGENTS,
    Diagnosis,
    FailureSample,
    Signature,
    SignatureAggregate,
)
from opslake.models.catalog import ToolCatalog
from opslake.models.window import Window
from opslake.observability import logger, metrics
from opslake.query.base import QueryEngine
from opslake.query.sqltext import sql_string_list, timestamp_literal, window_predicate
from opslake.queue import OpsQueue

if TYPE_CHECKING:
    from opslake.jobs.catalog import CatalogStore

MAX_SAMPLES = 5
SAMPLE_TEXT_CHARS = 600
MAX_CONTRASTS = 3
LLM_AGENT_ID = ANALYZER_REPORTER  # the reporter_id of this job's model calls (never analyzed)


@dataclass
class AnalyzerRun(JobReport):
    """What one analyzer run did."""

    failures_read: int = 0
    failures_counted: int = 0
    failures_view_written: bool = False
    failures_view_error: str | None = None  # why the view could not be ensured
    signatures_new: int = 0
    signatures_updated: int = 0
    signatures_total: int = 0
    signatures_merged: int = 0  # known signatures folded into another (word variants) this run
    templates_merged: int = 0  # raw templates that count under a merged signature, in all
    diagnoses: int = 0
    diagnoses_pending: int = 0
    llm_calls: int = 0
    fallbacks: int = 0
    diagnosed: list[str] = field(default_factory=list)
    #: the vocabulary the diagnoser judged advice with could not be read whole (the tool catalog
    #: the consolidator published, or the Glue tables): the run goes on with what it has
    vocabulary_errors: list[str] = field(default_factory=list)


#: The ``failures`` view's columns (name, Athena type), as the ``failures`` table had them.
FAILURES_VIEW = "failures"
FAILURES_VIEW_COLUMNS: list[tuple[str, str]] = [
    ("op_id", "varchar"),
    ("signature_id", "varchar"),
    ("endpoint", "varchar"),
    ("agent_id", "varchar"),
    ("error_type", "varchar"),
    ("ts", "timestamp(3)"),
    ("ingested_at", "timestamp(3)"),
    ("reporter_id", "varchar"),
    ("dt", "varchar"),
    ("hour", "varchar"),
]


def _analyzed(table: str) -> str:
    """The failures the analyzer reads: the model's own calls are not analyzed (diagnosing them
    with the same model would feed on itself); they are told apart by their server-set
    ``reporter_id``, not by the ``source`` a client may claim."""
    return f"FROM {table} WHERE NOT success AND reporter_id NOT IN ({sql_string_list(INTERNAL_REPORTERS)})"


def failures_view_sql(table: str, merges: str = MERGES_TABLE) -> str:
    """The ``failures`` view: one row per failed op with its signature, computed by the engine with
    the analyzer's own masking SQL and looked up in ``signature_merges`` (a word variant counts
    under its merged signature, as the analyzer counts it). ``ops`` is at-least-once until
    compaction, so the view groups by (``reporter_id``, ``op_id``, ``dt``, ``hour``) as the analyzer
    counts (a redelivered copy keeps its ``ingested_at``, hence its partition); ``min`` makes the
    other columns deterministic. ``dt``/``hour`` stay plain group keys taken from ``ops`` (the left
    side of the one LEFT JOIN), so queries on the view still prune partitions."""
    template = template_sql("endpoint", "error_type", "error")
    grouped = (
        f"SELECT op_id, min({signature_id_sql(template)}) AS signature_id, min(endpoint) AS endpoint,"
        " min(agent_id) AS agent_id, min(error_type) AS error_type, min(ts) AS ts,"
        f" min(ingested_at) AS ingested_at, reporter_id, dt, hour {_analyzed(table)}"
        " GROUP BY reporter_id, op_id, dt, hour"
    )
    return (
        "SELECT f.op_id, coalesce(m.signature_id, f.signature_id) AS signature_id, f.endpoint, f.agent_id,"
        " f.error_type, f.ts, f.ingested_at, f.reporter_id, f.dt, f.hour"
        f" FROM ({grouped}) f LEFT JOIN {merges} m ON m.raw_signature_id = f.signature_id"
    )


def ensure_failures_view(glue: Any, database: str, table: str) -> bool:
    """Create the ``failures`` view over ``database.table``, or update it when its SQL (the
    masking rules) changed; True when Glue was written. The analyzer calls it every run and the
    local stack at start: one definition of the view."""
    from opslake.lake.views import ensure_view

    return ensure_view(glue, database, FAILURES_VIEW, failures_view_sql(table), FAILURES_VIEW_COLUMNS)


def _witness_sql(trust: ReporterTrust, reporter: str = "reporter_id", agent: str = "agent_id") -> str:
    """SQL for :meth:`ReporterTrust.witness` (NULL when the key does not count)."""
    key = f"replace(replace({reporter}, '%', '%25'), '/', '%2F')"
    by_level = {
        "untrusted": "CAST(NULL AS varchar)",
        "reporter": key,
        "runtime": f"{key} || '/' || {agent}",
    }
    levels = {k: v for k, v in trust.levels.items() if k not in INTERNAL_REPORTERS}
    whens = [
        f"WHEN {reporter} IN ({sql_string_list(k for k, v in levels.items() if v == level)}) THEN {expr}"
        for level, expr in by_level.items()
    ]
    return (
        f"(CASE WHEN {reporter} IS NULL OR {reporter} = '' "
        f"OR {reporter} IN ({sql_string_list(INTERNAL_REPORTERS)}) THEN CAST(NULL AS varchar) "
        f"{' '.join(whens)} ELSE {by_level[trust.default]} END)"
    )


def _deduped(table: str, read: Window, limits: Sequence[datetime], columns: str) -> str:
    """The window's failures, one per (``reporter_id``, ``op_id``) (the lake is at-least-once until
    compaction; the first ingested is kept), with ``part``: 0 before ``limits[0]``, 1 before
    ``limits[1]``, 2 after."""
    part = (
        f"CASE WHEN ingested_at < {timestamp_literal(limits[0])} THEN 0 "
        f"WHEN ingested_at < {timestamp_literal(limits[1])} THEN 1 ELSE 2 END"
    )
    return f"""SELECT {columns}, {part} AS part FROM (
    SELECT {columns}, row_number() OVER (PARTITION BY reporter_id, op_id ORDER BY ingested_at) AS copy
    {_analyzed(table)} AND {window_predicate(read)}
  ) WHERE copy = 1"""


def aggregates_sql(
    table: str, window: Window, *, read_until: datetime, count_until: datetime, trust: ReporterTrust
) -> str:
    """One row per (template, part) of the failures ingested in ``[window.start, read_until)``:
    part 0 before ``count_until`` (what a run counts), 1 before ``window.end``, 2 after.
    Lists are sorted and bounded (agents, variants, witnesses a few per key, the earliest op ids),
    and sent as JSON text (Athena returns arrays as text)."""
    template = template_sql("endpoint", "error_type", "error")
    base = _deduped(
        table,
        Window(window.start, read_until),
        (count_until, window.end),
        "op_id, endpoint, agent_id, reporter_id, ts, ingested_at, error, error_type, input_summary",
    )
    return f"""SELECT signature_id, template, endpoint, error_type, part, count, first_seen, last_seen,
  json_format(CAST(slice(agents, 1, {MAX_TRACKED_AGENTS}) AS JSON)) AS agents,
  json_format(CAST(witnesses AS JSON)) AS witnesses,
  json_format(CAST(slice(variants, 1, {MAX_VARIANTS}) AS JSON)) AS variants,
  json_format(CAST(sample_op_ids AS JSON)) AS sample_op_ids
FROM (
  SELECT {signature_id_sql("template")} AS signature_id, template, endpoint, max(error_type) AS error_type, part,
    count(*) AS count, min(ts) AS first_seen, max(ts) AS last_seen,
    array_sort(array_agg(DISTINCT agent_id)) AS agents,
    array_sort(array_agg(DISTINCT witness) FILTER (WHERE witness IS NOT NULL AND witness_rank <= {RUNTIME_MAX_REPORTERS}))
      AS witnesses,
    array_sort(array_agg(DISTINCT variant)) AS variants,
    array_agg(op_id ORDER BY ingested_at, op_id) FILTER (WHERE arrival <= {MAX_SAMPLE_OP_IDS}) AS sample_op_ids
  FROM (
    SELECT template, endpoint, error_type, part, agent_id, op_id, ts, ingested_at, witness, variant,
      dense_rank() OVER (PARTITION BY template, part, reporter_id ORDER BY witness) AS witness_rank,
      row_number() OVER (PARTITION BY template, part ORDER BY ingested_at, op_id) AS arrival
    FROM (
      SELECT {template} AS template, {normalize_endpoint_sql("endpoint")} AS endpoint, error_type, part,
        agent_id, reporter_id, op_id, ts, ingested_at, {_witness_sql(trust)} AS witness,
        {variant_sql("input_summary")} AS variant
      FROM ({base})
    )
  )
  GROUP BY template, endpoint, part
)
ORDER BY signature_id, part"""


def samples_sql(table: str, window: Window, *, read_until: datetime, trust: ReporterTrust) -> str:
    """Up to :data:`MAX_SAMPLES` recent failures per template from keys that count
    (:meth:`ReporterTrust.sql_predicate`), one per distinct error first (texts cut): the evidence a
    diagnosis shows the model. An untrusted key's failures are counted, but their text never
    reaches a prompt (nor crowds out the samples that may)."""
    template = template_sql("endpoint", "error_type", "error")
    columns = "op_id, endpoint, agent_id, reporter_id, ts, ingested_at, error, error_type, input_summary, task_class"
    base = _deduped(table, Window(window.start, read_until), (read_until, read_until), columns)
    return f"""SELECT {signature_id_sql("template")} AS signature_id, op_id, endpoint, agent_id, reporter_id, ts,
  ingested_at, substr(error, 1, {SAMPLE_TEXT_CHARS}) AS error, error_type,
  substr(input_summary, 1, {SAMPLE_TEXT_CHARS}) AS input_summary, task_class
FROM (
  SELECT *, row_number() OVER (PARTITION BY template ORDER BY wording, ingested_at DESC, op_id) AS pick
  FROM (
    SELECT *, row_number() OVER (PARTITION BY template, error ORDER BY ingested_at DESC, op_id) AS wording
    FROM (SELECT {template} AS template, {columns} FROM ({base}) WHERE {trust.sql_predicate("reporter_id")})
  )
)
WHERE pick <= {MAX_SAMPLES}
ORDER BY signature_id, pick"""


def contrasts_sql(
    table: str, window: Window, endpoints: Sequence[str], *, trust: ReporterTrust | None = None
) -> str:
    """A few recent successes per endpoint, to show the model what working calls look like; only
    from keys that count under ``trust`` (:meth:`ReporterTrust.sql_predicate`: never opslake's own,
    never an untrusted key's, with an untrusted default only named keys'): text from a key that
    does not count never enters a prompt. One row per endpoint: ``max_by(…, n)`` keeps the n most
    recent in bounded memory (a window function would sort every success of the window); the key
    (time, then op id) makes ties come out the same on every engine. JSON text: Athena returns
    arrays as text."""
    names = sql_string_list(endpoints)
    counted = (trust or ReporterTrust()).sql_predicate("reporter_id")
    recency = "lpad(CAST(CAST(to_unixtime(ingested_at) * 1000 AS bigint) AS varchar), 15, '0') || op_id"
    return f"""SELECT endpoint, json_format(CAST(max_by(input_summary, {recency}, {MAX_CONTRASTS}) AS JSON)) AS inputs
FROM {table}
WHERE {window_predicate(window)} AND success AND input_summary IS NOT NULL AND endpoint IN ({names})
  AND {counted}
GROUP BY endpoint"""


class Analyzer(ScheduledJob[AnalyzerRun]):
    name = "analyzer"
    report_type = AnalyzerRun

    def __init__(
        self,
        *,
        settings: Settings,
        engine: QueryEngine,
        store: ObjectStore,
        state: StateStore,
        diagnoser: Diagnoser,
        glue: Any | None = None,
        ops_queue: OpsQueue | None = None,
        catalog: CatalogStore | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        super().__init__(settings=settings, engine=engine, state=state, ops_queue=ops_queue, clock=clock)
        self.store = store
        self.glue = glue  # where the ``failures`` view is kept (None: not managed, e.g. in unit tests)
        self.diagnoser = diagnoser
        self.catalog = catalog  # the tool catalog the consolidator published (None: none read)
        self.trust = ReporterTrust.from_settings(settings)

    def work(self, lease: Lease, backfill: Backfill | None, report: AnalyzerRun) -> None:
        now = self.clock()
        watermark = lease.state.watermark
        self._ensure_failures_view(report)
        if backfill:
            window = Window(backfill.since, backfill.until)
            # Scheduled runs counted everything below the watermark; a backfill only adds
            # signatures they never saw (e.g. from before the first run's lookback).
            count_until = min(window.end, watermark) if watermark else window.end
        else:
            found = self.next_window(
                lease,
                now,
                initial_lookback=timedelta(hours=self.settings.analyzer_initial_lookback_h),
                max_span=timedelta(hours=self.settings.analyzer_max_window_h),
            )
            if found is None:
                self.nothing_to_do(lease, report)
                return
            window, count_until = found, found.end
        report.window = window.as_dict()

        signatures = {
            sid: Signature.model_validate(raw) for sid, raw in lease.state.data.get("signatures", {}).items()
        }
        merged = {
            raw: MergedRaw(str(found["signature_id"]), str(found["template"]))
            for raw, found in lease.state.data.get("merges", {}).items()
        }
        samples: dict[str, list[dict[str, Any]]] = dict(lease.state.data.get("samples", {}))
        known_before = set(signatures)
        raw_known_before = known_before | set(merged)  # raw ids: a backfill counts only unseen ones
        before = {sid: sig.count for sid, sig in signatures.items()}

        sql = aggregates_sql(
            self.table, window, read_until=window.end, count_until=count_until, trust=self.trust
        )
        aggregates = [SignatureAggregate.model_validate(row) for row in self.query(sql, report)]
        report.failures_read = sum(a.count for a in aggregates if a.part < 2)
        self._merge_variants(signatures, merged, samples, aggregates, report)
        for agg in aggregates:
            count = agg.part == 0 and (not backfill or agg.signature_id not in raw_known_before)
            target = merged_id(merged, agg.signature_id)
            if target != agg.signature_id:  # a word variant: counted under its merged signature
                agg = agg.model_copy(update={"signature_id": target, "template": signatures[target].template})
            merge_aggregate(signatures, agg, trust=self.trust, count=count)
            report.failures_counted += agg.count if count else 0
        self._remember_samples(samples, merged, window, report)

        report.signatures_new = len(set(signatures) - known_before)
        report.signatures_updated = sum(
            1 for sid, sig in signatures.items() if sid in known_before and sig.count != before[sid]
        )
        report.templates_merged = len(merged)
        seen_in_window = {merged_id(merged, agg.signature_id) for agg in aggregates}
        candidates = (
            [signatures[s] for s in sorted(seen_in_window)] if backfill else list(signatures.values())
        )
        chosen = select_for_diagnosis(candidates, self.settings.diagnosis_budget)
        report.diagnoses_pending = sum(1 for s in candidates if needs_diagnosis(s)) - len(chosen)
        self._diagnose(chosen, samples, window, now, report)

        data = {
            "signatures": {sid: sig.model_dump(mode="json") for sid, sig in signatures.items()},
            "merges": {raw: found._asdict() for raw, found in sorted(merged.items())},
            "samples": samples,
        }
        self.state.commit(lease, watermark=watermark if backfill else window.end, data=data)
        report.signatures_total = len(signatures)
        self._export_signatures(signatures)
        self._export_merges(signatures, merged)
        metrics.add_metric(name="FailuresAnalyzed", unit="Count", value=report.failures_read)
        metrics.add_metric(name="SignaturesNew", unit="Count", value=report.signatures_new)
        metrics.add_metric(name="Diagnoses", unit="Count", value=report.diagnoses)
        metrics.add_metric(name="DiagnosisFallbacks", unit="Count", value=report.fallbacks)

    # -- steps ---------------------------------------------------------------------------------
    def _ensure_failures_view(self, report: AnalyzerRun) -> None:
        """Create the ``failures`` view, or update it when its SQL (the masking rules) changed. A
        Glue error here (e.g. AccessDenied deleting the old non-view ``failures`` table: the role
        has no glue:DeleteTable) is reported, not raised: the signatures do not depend on it."""
        if self.glue is None:
            return
        try:
            report.failures_view_written = ensure_failures_view(
                self.glue, self.settings.glue_database, self.table
            )
        except Exception as exc:  # botocore's ClientError and anything a Glue call raises
            report.failures_view_error = f"{type(exc).__name__}: {exc}"[:500]
            logger.warning(
                "failures view not created or updated; the run goes on", error=report.failures_view_error
            )
            metrics.add_metric(name="FailuresViewErrors", unit="Count", value=1)

    def _merge_variants(
        self,
        signatures: dict[str, Signature],
        merged: dict[str, MergedRaw],
        samples: dict[str, list[dict[str, Any]]],
        aggregates: Sequence[SignatureAggregate],
        report: AnalyzerRun,
    ) -> None:
        """Merge word variants among the known signatures and this window's templates (one row per
        template: the cost follows templates, not ops); the samples of a folded signature join its
        survivor's."""
        new = [
            NewTemplate(agg.signature_id, agg.endpoint, agg.error_type, agg.template, agg.first_seen)
            for agg in sorted(aggregates, key=lambda a: (a.first_seen, a.signature_id))
        ]
        outcome = merge_variants(signatures, merged, new, trust=self.trust)
        for absorbed, survivor in outcome.absorbed.items():
            samples[survivor] = merge_samples(samples.get(survivor, []), samples.pop(absorbed, []))
        report.signatures_merged = len(outcome.absorbed)

    def _remember_samples(
        self,
        samples: dict[str, list[dict[str, Any]]],
        merged: dict[str, MergedRaw],
        window: Window,
        report: AnalyzerRun,
    ) -> None:
        """Keep up to 5 recent failures per signature (texts cut), distinct errors first, so a
        signature diagnosed in a later run still has evidence to show the model: the window's
        samples (:func:`samples_sql`, only from keys that count) before the ones kept earlier. A
        word variant's samples are its merged signature's."""
        sql = samples_sql(self.table, window, read_until=window.end, trust=self.trust)
        found: dict[str, list[dict[str, Any]]] = {}
        for row in self.query(sql, report):
            sid = merged_id(merged, row.pop("signature_id"))
            found.setdefault(sid, []).append(FailureSample.model_validate(row).model_dump(mode="json"))
        for sid, new in found.items():
            samples[sid] = merge_samples(new, samples.get(sid, []))

    def _vocabulary(self, report: AnalyzerRun) -> Vocabulary:
        """What the diagnoser may name and show the model: the tool catalog as the consolidator last
        published it and the Glue tables. A part that cannot be read is reported; the run goes on
        (advice that names what is not known is refused, and the heuristic answers)."""
        from opslake.jobs.catalog import read_tables, vocabulary_read_error

        catalog, tables = ToolCatalog(), {}
        if self.catalog is not None:
            try:
                catalog = self.catalog.current()
            except Exception as exc:  # S3 errors and a malformed object alike
                vocabulary_read_error(report.vocabulary_errors, "tool catalog", exc)
        if self.glue is not None:
            try:
                tables = read_tables(self.glue, self.settings.glue_database)
            except Exception as exc:  # botocore's ClientError and the like
                vocabulary_read_error(report.vocabulary_errors, "Glue tables", exc)
        return vocabulary_of(
            catalog, tables, trust=self.trust, min_reporters=self.settings.playbook_min_reporters
        )

    def _diagnose(
        self,
        chosen: Sequence[tuple[Signature, str]],
        samples: dict[str, list[dict[str, Any]]],
        window: Window,
        now: datetime,
        report: AnalyzerRun,
    ) -> None:
        if not chosen:
            return
        self.diagnoser.vocabulary = self._vocabulary(report)
        contrasts: dict[str, list[str]] = {}
        if self.diagnoser.wants_contrasts:
            endpoints = [sig.endpoint for sig, _ in chosen]
            sql = contrasts_sql(self.table, window, endpoints, trust=self.trust)
            for row in self.query(sql, report):
                inputs = row["inputs"]
                found = json.loads(inputs) if isinstance(inputs, str) else inputs
                contrasts[row["endpoint"]] = [str(v) for v in found]
        for sig, reason in chosen:
            # samples kept before a key was marked untrusted are dropped here, under today's levels
            sig_samples = [
                sample
                for sample in (FailureSample.model_validate(s) for s in samples.get(sig.signature_id, []))
                if self.trust.counts(sample.reporter_id)
            ]
            outcome = self.diagnoser.diagnose(sig, sig_samples, contrasts.get(sig.endpoint, []))
            diagnosis_id = f"dg_{sig.signature_id}_{sig.diagnoses + 1}"
            diagnosis = Diagnosis(
                diagnosis_id=diagnosis_id,
                signature_id=sig.signature_id,
                endpoint=sig.endpoint,
                template=sig.template,
                **outcome.answer.model_dump(),
                diagnosed_by=outcome.diagnosed_by,
                failure_count=sig.count,
                agent_count=sig.agent_count,
                # under the trust levels as they are now (a key marked untrusted since drops out)
                reporter_count=self.trust.count(sig.reporters),
                reporters=list(sig.reporters),
                evidence_op_ids=[s.op_id for s in sig_samples] or list(sig.sample_op_ids),
                created_at=now,
            )
            self.store.put(
                derived.diagnosis_key(diagnosis_id),
                derived.parquet_bytes("diagnoses", [diagnosis.model_dump()]),
                content_type="application/vnd.apache.parquet",
            )
            mark_diagnosed(sig, diagnosis_id=diagnosis_id, at=now)
            report.diagnoses += 1
            report.fallbacks += int(outcome.fell_back)
            report.diagnosed.append(f"{sig.signature_id}:{reason}:{outcome.diagnosed_by}")
        report.llm_calls = settle_llm_calls(
            self.diagnoser.llm, self.ops_queue, agent_id=LLM_AGENT_ID, purpose="diagnosis"
        )

    def _export_signatures(self, signatures: dict[str, Signature]) -> None:
        rows = [
            {
                **sig.model_dump(),
                "variant_count": len(sig.variants),
                "sample_op_ids": list(sig.sample_op_ids),
            }
            for sig in sorted(signatures.values(), key=lambda s: (-s.count, s.signature_id))
        ]
        self.store.put(
            derived.whole_table_key("signatures"),
            derived.parquet_bytes("signatures", rows),
            content_type="application/vnd.apache.parquet",
        )

    def _export_merges(self, signatures: dict[str, Signature], merged: dict[str, MergedRaw]) -> None:
        """The ``signature_merges`` table (raw signature id → the merged signature and both
        templates), written every run even when empty, so every SQL that looks a signature up in it
        finds the table's object."""
        rows = [
            {
                "raw_signature_id": raw,
                "signature_id": found.signature_id,
                "template": signatures[found.signature_id].template,
                "raw_template": found.template,
            }
            for raw, found in sorted(merged.items())
            if found.signature_id in signatures
        ]
        self.store.put(
            derived.whole_table_key(MERGES_TABLE),
            derived.parquet_bytes(MERGES_TABLE, rows),
            content_type="application/vnd.apache.parquet",
        )


def merge_samples(new: Sequence[dict[str, Any]], kept: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most :data:`MAX_SAMPLES` samples, one per op (``reporter_id``, ``op_id``): ``new`` before
    ``kept``, and among them first one per distinct error, then the rest in that order."""
    seen: set[tuple[Any, Any]] = set()
    errors: set[Any] = set()
    first, rest = [], []
    for sample in [*new, *kept]:
        key = (sample.get("reporter_id"), sample["op_id"])
        if key in seen:
            continue
        seen.add(key)
        if sample.get("error") not in errors:
            errors.add(sample.get("error"))
            first.append(sample)
        else:
            rest.append(sample)
    return [*first, *rest][:MAX_SAMPLES]


def build_analyzer(settings: Settings) -> Analyzer:
    """An analyzer wired to this process's AWS clients (per-container clients, per-run state)."""
    from opslake import runtime
    from opslake.jobs.catalog import CatalogStore
    from opslake.lake.store import S3ObjectStore

    parts = wire(settings, state_key=settings.analyzer_state_key, lease_s=settings.analyzer_lease_s)
    return Analyzer(
        settings=settings,
        engine=parts.engine,
        store=S3ObjectStore(parts.s3, settings.lake_bucket),
        glue=runtime.client("glue"),
        state=parts.state,
        diagnoser=Diagnoser(parts.llm),
        ops_queue=parts.ops_queue,
        catalog=CatalogStore(parts.s3, settings.lake_bucket),
    )
