"""The failure analyzer: new failures → signatures → bounded, validated diagnoses.

One run (every 5 minutes, or a backfill) does, in this order:

1. take the lease on ``state/analyzer.json`` (two overlapping runs: one of them does nothing);
2. read the failed ops of the window ``[watermark, now − settle)``, pruned on ``dt``/``hour``;
3. give every failure exactly one signature and rewrite the ``failures`` object of each hour it
   touched (whole, so a redone window overwrites instead of duplicating); a row names its op by
   (``reporter_id``, ``op_id``), since op ids are unique per API key only;
4. diagnose the signatures that are new or changed, at most ``diagnosis_budget`` of them, most
   frequent first, each diagnosis an object named by its id (a redo overwrites it);
5. commit the new watermark and the signatures with one conditional write. Until that write,
   nothing is counted: a crash anywhere before it makes the next run redo the same window;
6. export the ``signatures`` table (one object, replaced whole).

The diagnosis model's calls become op records (``source`` "llm") on the ops queue, so their
cost and errors land in the lake like any other op.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from opslake.analysis.diagnoser import Diagnoser
from opslake.analysis.reporters import ANALYZER_REPORTER, INTERNAL_REPORTERS, ReporterTrust
from opslake.analysis.signatures import SignatureIndex, mark_diagnosed, needs_diagnosis, select_for_diagnosis
from opslake.config import Settings
from opslake.jobs.base import JobReport, ScheduledJob, wire
from opslake.jobs.lease import Lease, StateStore
from opslake.jobs.trigger import Backfill
from opslake.lake import derived
from opslake.lake.catalog import Catalog
from opslake.lake.store import ObjectStore
from opslake.llm.records import settle_llm_calls
from opslake.models.analysis import Diagnosis, FailureRow, FailureSample, Signature
from opslake.models.window import Window
from opslake.observability import metrics
from opslake.query.base import QueryEngine
from opslake.query.sqltext import sql_string_list, window_predicate
from opslake.queue import OpsQueue

MAX_SAMPLES = 5
SAMPLE_TEXT_CHARS = 600
MAX_CONTRASTS = 3
LLM_AGENT_ID = ANALYZER_REPORTER  # the reporter_id of this job's model calls (never analyzed)


@dataclass
class AnalyzerRun(JobReport):
    """What one analyzer run did."""

    failures_read: int = 0
    failures_counted: int = 0
    failure_partitions_written: int = 0
    signatures_new: int = 0
    signatures_updated: int = 0
    signatures_total: int = 0
    diagnoses: int = 0
    diagnoses_pending: int = 0
    llm_calls: int = 0
    fallbacks: int = 0
    diagnosed: list[str] = field(default_factory=list)


def failures_sql(table: str, window: Window, *, read_until: datetime) -> str:
    """Failed ops of the window's partitions, from the start of its first hour (so each hour's
    ``failures`` object can be rewritten whole) to ``read_until``. The model's own calls are not
    analyzed (diagnosing them with the same model would feed on itself): they are told apart by
    their server-set ``reporter_id``, not by the ``source`` a client may claim."""
    read = Window(window.start, read_until)
    return f"""SELECT op_id, endpoint, agent_id, reporter_id, ts, ingested_at, error, error_type, input_summary,
       task_class
FROM {table}
WHERE {window_predicate(read, from_start_of_hour=True)}
  AND NOT success AND reporter_id NOT IN ({sql_string_list(INTERNAL_REPORTERS)})
ORDER BY ingested_at, op_id"""


def contrasts_sql(
    table: str, window: Window, endpoints: Sequence[str], *, trust: ReporterTrust | None = None
) -> str:
    """A few recent successes per endpoint, to show the model what working calls look like; only
    from keys that count under ``trust`` (:meth:`ReporterTrust.sql_predicate`: never opslake's own,
    never an untrusted key's, with an untrusted default only named keys'): text from a key that
    does not count never enters a prompt."""
    names = sql_string_list(endpoints)
    counted = (trust or ReporterTrust()).sql_predicate("reporter_id")
    return f"""SELECT endpoint, input_summary FROM (
  SELECT endpoint, input_summary,
         row_number() OVER (PARTITION BY endpoint ORDER BY ingested_at DESC, op_id) AS rn
  FROM {table}
  WHERE {window_predicate(window)} AND success AND input_summary IS NOT NULL AND endpoint IN ({names})
    AND {counted}
) WHERE rn <= {MAX_CONTRASTS}"""


def _sample(row: dict[str, Any]) -> FailureSample:
    def cut(value: Any) -> str | None:
        return None if value is None else str(value)[:SAMPLE_TEXT_CHARS]

    return FailureSample(
        op_id=row["op_id"],
        endpoint=row["endpoint"],
        agent_id=row["agent_id"],
        reporter_id=row.get("reporter_id"),
        ts=row["ts"],
        ingested_at=row["ingested_at"],
        error=cut(row.get("error")),
        error_type=row.get("error_type"),
        input_summary=cut(row.get("input_summary")),
        task_class=row.get("task_class"),
    )


class Analyzer(ScheduledJob[AnalyzerRun]):
    name = "analyzer"
    report_type = AnalyzerRun

    def __init__(
        self,
        *,
        settings: Settings,
        engine: QueryEngine,
        store: ObjectStore,
        failures_catalog: Catalog,
        state: StateStore,
        diagnoser: Diagnoser,
        ops_queue: OpsQueue | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        super().__init__(settings=settings, engine=engine, state=state, ops_queue=ops_queue, clock=clock)
        self.store = store
        self.failures_catalog = failures_catalog
        self.diagnoser = diagnoser
        self.trust = ReporterTrust.from_settings(settings)

    def work(self, lease: Lease, backfill: Backfill | None, report: AnalyzerRun) -> None:
        now = self.clock()
        watermark = lease.state.watermark
        if backfill:
            window = Window(backfill.since, backfill.until)
            # Rewriting an hour must keep what scheduled runs already wrote there (up to the
            # watermark): read the last hour up to its end, or the watermark if that is earlier.
            hour_end = window.end.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
            read_until = max(window.end, min(hour_end, watermark or window.end))
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
            window, read_until = found, found.end
        report.window = window.as_dict()

        signatures = {
            sid: Signature.model_validate(raw) for sid, raw in lease.state.data.get("signatures", {}).items()
        }
        samples: dict[str, list[dict[str, Any]]] = dict(lease.state.data.get("samples", {}))
        known_before = set(signatures)
        before = {sid: sig.count for sid, sig in signatures.items()}

        rows = self.query(failures_sql(self.table, window, read_until=read_until), report)
        failures = _dedupe(_sample(row) for row in rows)
        report.failures_read = sum(1 for f in failures if window.start <= f.ingested_at < window.end)

        index = SignatureIndex(signatures, trust=self.trust)
        if backfill:
            # Scheduled runs counted everything below the watermark; a backfill only adds
            # signatures they never saw (e.g. from before the first run's lookback).
            limit = min(window.end, watermark) if watermark else window.end
            counted = {
                (f.reporter_id, f.op_id)
                for f in failures
                if window.start <= f.ingested_at < limit
                and index.signature_of(f.endpoint, f.error_type, f.error)[0] not in known_before
            }
        else:
            counted = {(f.reporter_id, f.op_id) for f in failures if f.ingested_at >= window.start}
        assigned = index.apply(failures, count=counted)
        report.failures_counted = len(counted)
        self._remember_samples(samples, failures, assigned, window)
        self._write_failures(assigned, report)

        report.signatures_new = len(set(signatures) - known_before)
        report.signatures_updated = sum(
            1 for sid, sig in signatures.items() if sid in known_before and sig.count != before[sid]
        )
        seen_in_window = {row.signature_id for row in assigned if row.ingested_at >= window.start}
        candidates = [signatures[s] for s in seen_in_window] if backfill else list(signatures.values())
        chosen = select_for_diagnosis(candidates, self.settings.diagnosis_budget)
        report.diagnoses_pending = sum(1 for s in candidates if needs_diagnosis(s)) - len(chosen)
        self._diagnose(chosen, samples, window, now, report)

        data = {
            "signatures": {sid: sig.model_dump(mode="json") for sid, sig in signatures.items()},
            "samples": samples,
        }
        self.state.commit(lease, watermark=watermark if backfill else window.end, data=data)
        report.signatures_total = len(signatures)
        self._export_signatures(signatures)
        metrics.add_metric(name="FailuresAnalyzed", unit="Count", value=report.failures_read)
        metrics.add_metric(name="SignaturesNew", unit="Count", value=report.signatures_new)
        metrics.add_metric(name="Diagnoses", unit="Count", value=report.diagnoses)
        metrics.add_metric(name="DiagnosisFallbacks", unit="Count", value=report.fallbacks)

    # -- steps ---------------------------------------------------------------------------------
    def _remember_samples(
        self,
        samples: dict[str, list[dict[str, Any]]],
        failures: Sequence[FailureSample],
        assigned: Sequence[FailureRow],
        window: Window,
    ) -> None:
        """Keep up to 5 recent failures per signature (texts cut), preferring distinct errors, so a
        signature diagnosed in a later run still has evidence to show the model. Only failures of
        keys that count are kept: an untrusted key's failures are counted in their signature, but
        their text never reaches the diagnosis (nor crowds out the samples that may)."""
        for failure, row in zip(failures, assigned, strict=True):
            if failure.ingested_at < window.start or not self.trust.counts(failure.reporter_id):
                continue
            kept = samples.setdefault(row.signature_id, [])
            if any(k["op_id"] == failure.op_id and k.get("reporter_id") == failure.reporter_id for k in kept):
                continue
            entry = failure.model_dump(mode="json")
            if len(kept) < MAX_SAMPLES:
                kept.append(entry)
            elif all(k.get("error") != failure.error for k in kept):
                kept[-1] = entry  # a new wording replaces the newest of the old ones

    def _write_failures(self, assigned: Sequence[FailureRow], report: AnalyzerRun) -> None:
        groups = derived.partitions_of([row.model_dump() for row in assigned])
        if not groups:
            return
        self.failures_catalog.ensure_partitions(groups)
        for (dt, hour), rows in sorted(groups.items()):
            self.store.put(
                derived.failures_key(dt, hour),
                derived.parquet_bytes("failures", rows),
                content_type="application/vnd.apache.parquet",
            )
            report.failure_partitions_written += 1

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
        contrasts: dict[str, list[str]] = {}
        if self.diagnoser.wants_contrasts:
            endpoints = [sig.endpoint for sig, _ in chosen]
            sql = contrasts_sql(self.table, window, endpoints, trust=self.trust)
            for row in self.query(sql, report):
                contrasts.setdefault(row["endpoint"], []).append(str(row["input_summary"]))
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


def _dedupe(failures: Iterable[FailureSample]) -> list[FailureSample]:
    """One row per op (the lake is at-least-once until compaction): per (reporter_id, op_id), as the
    writer and compaction keep (:mod:`opslake.lake.opkey`), so another API key's op with the same
    ``op_id`` is never dropped in favour of the first one read. A sample read without a
    ``reporter_id`` counts as one reporter's (the key is then ``op_id`` alone)."""
    seen: set[tuple[str | None, str]] = set()
    unique = []
    for failure in failures:
        key = (failure.reporter_id, failure.op_id)
        if key not in seen:
            seen.add(key)
            unique.append(failure)
    return unique


def build_analyzer(settings: Settings) -> Analyzer:
    """An analyzer wired to this process's AWS clients (per-container clients, per-run state)."""
    from opslake import runtime
    from opslake.lake.catalog import GlueCatalog
    from opslake.lake.store import S3ObjectStore

    parts = wire(settings, state_key=settings.analyzer_state_key, lease_s=settings.analyzer_lease_s)
    return Analyzer(
        settings=settings,
        engine=parts.engine,
        store=S3ObjectStore(parts.s3, settings.lake_bucket),
        failures_catalog=GlueCatalog(runtime.client("glue"), settings.glue_database, "failures"),
        state=parts.state,
        diagnoser=Diagnoser(parts.llm),
        ops_queue=parts.ops_queue,
    )
