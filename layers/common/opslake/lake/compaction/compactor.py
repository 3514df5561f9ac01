"""The compactor: finds candidate partitions and runs each through the journal's state machine.

The machine (:class:`_Run`) is all here, in step order; what each step does to S3 and Glue is in
``planner`` (listings), ``merge`` (outputs), ``swap`` (Glue location, deletes) and ``journal``
(the conditional writes that record each step).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from opslake.errors import CompactionError
from opslake.lake.compaction.journal import (
    ACTIVE_STATES,
    DONE,
    PLANNED,
    SWAPPED,
    VERIFIED,
    WRITTEN,
    Journal,
    JournalLeaseLost,
    JournalStore,
    iso,
    parse_time,
)
from opslake.lake.compaction.merge import verify_generation, write_generation
from opslake.lake.compaction.options import CompactionOptions
from opslake.lake.compaction.planner import Planner, SourceFile, SourcesChanged
from opslake.lake.compaction.report import CompactionReport, PartitionResult
from opslake.lake.compaction.swap import GluePartitions, delete_keys, location_of
from opslake.observability import logger

if TYPE_CHECKING:
    from opslake.config import Settings

#: Where ``hook`` is called, in order: a test raises there to stop the compactor like a crash.
CRASH_POINTS = (
    "planned",  # journal says planned; nothing written yet
    "outputs_put",  # outputs are in S3, the journal still says planned
    "written",
    "verified",
    "glue_updated",  # Glue points at the new files, the journal still says verified
    "swapped",
    "old_generations_deleted",  # abandoned/previous generations deleted, the journal still says swapped
    "done",  # the journal says done; the planned files under ops/ are not deleted yet
    "sources_deleted",
)


class Compactor:
    """Compacts closed hours of one partitioned table (see the package docstring).

    Crash points (``CRASH_POINTS``) and what a rerun does. A rerun finds the journal of a
    crashed run still leased; once the lease expires (``lease_s``) it takes over:

    * ``planned`` / ``outputs_put`` / ``written`` (journal planned or written): nothing is
      visible yet. The rerun abandons that generation (recorded in the journal, its folder
      deleted with the old files after the grace period, long after any zombie run ended) and
      plans a new one. A new generation, never a resumed one, so a slow zombie writing into its
      old folder cannot touch files that are, or will be, visible.
    * ``verified``: the rerun first asks Glue; if the location already is the generation (crash
      at ``glue_updated``) it records ``swapped``. Otherwise it re-lists the sources and swaps
      only if they are exactly those planned; if files appeared or changed (late redelivery),
      it abandons the generation and re-plans (at most ``max_replans`` times in a run; after
      that the partition is left, with its lease released, for the next run).
    * ``swapped`` / ``old_generations_deleted``: the swap is durable; once the grace period has
      passed a run deletes the old generations again (deleting a missing key is a no-op).
    * ``done``: done is recorded before the planned files under ``ops/`` are deleted, so they
      keep the partition discoverable; a rerun that finds only planned files left (same key
      and ETag) deletes them. Files under ``ops/`` that the journal did not plan (late writes)
      start a new generation that merges the current compacted files with them.
    * ``sources_deleted``: nothing left to do.

    Every journal write is conditional on the ETag read, so a compactor whose lease was taken
    over stops at its next step; it never deletes (only a ``swapped`` journal allows deletes,
    and the delete step checks that Glue still points at the generation).
    """

    def __init__(
        self,
        s3: Any,
        glue: Any,
        *,
        bucket: str,
        database: str,
        table: str = "ops",
        ops_prefix: str | None = None,
        clock: Callable[[], datetime] | None = None,
        options: CompactionOptions | None = None,
        hook: Callable[[str, str, str], None] | None = None,
    ) -> None:
        self._s3 = s3
        self._glue = glue
        self.bucket = bucket
        self.database = database
        self.table = table
        self.planner = Planner(s3, bucket, (ops_prefix or f"{table}/").rstrip("/") + "/")
        self.glue_partitions = GluePartitions(glue, database, table)
        self.state_prefix = f"state/compaction/{table}/"
        self._clock = clock or (lambda: datetime.now(UTC))
        self.options = options or CompactionOptions()
        self._hook = hook

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        s3: Any,
        glue: Any,
        clock: Callable[[], datetime] | None = None,
        **overrides: Any,
    ) -> Compactor:
        options = CompactionOptions(
            min_age_hours=settings.compact_after_hours,
            target_file_bytes=settings.compaction_target_bytes,
            grace_s=settings.compaction_grace_s,
            max_partitions=settings.compaction_max_partitions,
            **overrides,
        )
        return cls(
            s3,
            glue,
            bucket=settings.lake_bucket,
            database=settings.glue_database,
            table=settings.ops_table,
            ops_prefix=settings.ops_prefix,
            clock=clock,
            options=options,
        )

    # -- locations -----------------------------------------------------------------------------
    def journal_key(self, dt: str, hour: str) -> str:
        return f"{self.state_prefix}dt={dt}/hour={hour}.json"

    # -- running -------------------------------------------------------------------------------
    def run(self) -> CompactionReport:
        """Compact eligible partitions, oldest first; one partition's failure never stops the others."""
        run_id = f"{self._clock():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        report = CompactionReport(run_id)
        worked = 0
        for (dt, hour), files in self.planner.candidates(self._clock(), self.options.min_age_hours).items():
            if worked >= self.options.max_partitions:
                report.deferred += 1
                continue
            result = self._partition(dt, hour, files, run_id)
            report.partitions.append(result)
            if result.status in ("compacted", "cleaned", "failed"):
                worked += 1
        if report.errors:
            logger.error("compaction errors", run_id=run_id, errors=report.errors)
        logger.info(
            "compaction run",
            run_id=run_id,
            compacted=len(report.compacted),
            files_in=report.total("files_in"),
            files_out=report.total("files_out"),
            duplicates_dropped=report.total("duplicates_dropped"),
            files_deleted=report.total("files_deleted"),
            deferred=report.deferred,
        )
        return report

    def _partition(self, dt: str, hour: str, files: list[SourceFile], run_id: str) -> PartitionResult:
        result = PartitionResult(dt, hour)
        state = _Run(self, dt, hour, run_id, result)
        try:
            state.go(files)
        except JournalLeaseLost as exc:
            result.status, result.reason = "busy", f"another compactor took the partition over ({exc})"
        except Exception as exc:
            result.status, result.reason = "failed", f"{type(exc).__name__}: {exc}"
            logger.error("compaction of a partition failed", dt=dt, hour=hour, error=result.reason)
            state.release(result.reason)
        result.state = state.journal.state if state.journal else ""
        return result

    def _call_hook(self, point: str, dt: str, hour: str) -> None:
        if self._hook is not None:
            self._hook(point, dt, hour)


class _Run:
    """One run's work on one partition: a small state machine over its journal."""

    def __init__(
        self, compactor: Compactor, dt: str, hour: str, run_id: str, result: PartitionResult
    ) -> None:
        self.c = compactor
        self.s3 = compactor._s3
        self.planner = compactor.planner
        self.glue = compactor.glue_partitions
        self.dt, self.hour, self.run_id, self.result = dt, hour, run_id, result
        self.store = JournalStore(self.s3, compactor.bucket, compactor.journal_key(dt, hour))
        self.journal: Journal | None = None
        self.replans = 0

    @property
    def now(self) -> datetime:
        return self.c._clock()

    def hook(self, point: str) -> None:
        self.c._call_hook(point, self.dt, self.hour)

    # -- journal -------------------------------------------------------------------------------
    def save(self, state: str, *, hold: bool = True) -> None:
        """Record ``state`` with a conditional write; ``hold`` renews the lease, else releases it."""
        assert self.journal is not None
        lease_s = self.c.options.lease_s if hold else 0
        self.store.save(self.journal, state, owner=self.run_id, now=self.now, lease_s=lease_s)

    def release(self, error: str) -> None:
        """After a failure, give the partition back at once (best effort) so the next run need
        not wait for the lease to expire."""
        if self.journal is None or self.store.etag is None or self.journal.state not in ACTIVE_STATES:
            return
        self.journal.last_error = error[:1000]
        try:
            self.save(self.journal.state, hold=False)
        except Exception as exc:  # the lease then simply expires
            logger.warning("could not release compaction lease", dt=self.dt, hour=self.hour, error=str(exc))

    # -- the state machine ---------------------------------------------------------------------
    def go(self, files: list[SourceFile]) -> None:
        self.journal = self.store.read()
        location = self.glue.location(self.dt, self.hour)
        if location is None:
            self.skip(
                f"not registered in Glue ({len(files)} files under {self.planner.original_prefix(self.dt, self.hour)})"
            )
            return
        journal = self.journal
        if journal is not None and journal.state == DONE and self.leftovers(files, location):
            return
        if journal is None or journal.state == DONE:
            if (
                journal is None
                and len(files) == 1
                and location == self.planner.uri(self.planner.original_prefix(self.dt, self.hour))
            ):
                # The writer already dedupes within a batch: one file has nothing to merge or drop.
                self.skip(f"a single file ({files[0].size} bytes): nothing to merge")
                return
            self.plan(location, abandoned=[])
        elif journal.state in (*ACTIVE_STATES, SWAPPED):
            if journal.leased(self.now):
                self.result.status = "busy"
                self.result.reason = f"{journal.state} by {journal.owner}, leased until {journal.lease_until}"
                return
            if journal.state in (PLANNED, WRITTEN):  # take over with a fresh generation
                self.plan(location, abandoned=[*journal.abandoned, journal.target_location])
            elif journal.state == VERIFIED:
                self.save(journal.state)  # take the lease; the generation may already be visible
        self.steps()

    def steps(self) -> None:
        assert self.journal is not None
        while True:
            journal = self.journal
            self.result.generation = journal.generation
            try:
                if journal.state == PLANNED:
                    self.write()
                elif journal.state == WRITTEN:
                    self.verify()
                elif journal.state == VERIFIED:
                    self.swap()
                elif journal.state == SWAPPED:
                    if parse_time(journal.delete_after) > self.now:
                        if not self.result.status:
                            self.result.status = "waiting"
                            self.result.reason = f"old files are deleted after {journal.delete_after}"
                        return
                    self.save(SWAPPED)  # take the lease for the deletes
                    self.delete()
                else:
                    return
            except SourcesChanged as exc:
                if self.journal.state == SWAPPED:  # never abandon a visible generation
                    raise CompactionError(f"sources changed after the swap: {exc}") from exc
                abandoned = [*journal.abandoned, journal.target_location]
                if self.replans >= self.c.options.max_replans:
                    journal.abandoned = abandoned
                    self.release(f"sources changed: {exc}")
                    self.skip(f"sources changed during compaction ({exc}); left for the next run")
                    return
                self.replans += 1
                logger.info("sources changed; re-planning", dt=self.dt, hour=self.hour, reason=str(exc))
                self.plan(
                    self.glue.location(self.dt, self.hour) or journal.source_location, abandoned=abandoned
                )

    def skip(self, reason: str) -> None:
        self.result.status, self.result.reason = "skipped", reason

    # -- steps ---------------------------------------------------------------------------------
    def plan(self, location: str, *, abandoned: list[str]) -> None:
        original = self.planner.uri(self.planner.original_prefix(self.dt, self.hour))
        root = self.planner.uri(self.planner.compacted_root(self.dt, self.hour))
        if location != original and not location.startswith(root):
            raise CompactionError(f"Glue location {location} is neither {original} nor under {root}")
        sources = self.planner.sources(self.dt, self.hour, location)
        generation = f"{self.now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        previous = self.journal
        self.journal = Journal(
            dt=self.dt,
            hour=self.hour,
            state=PLANNED,
            generation=generation,
            owner=self.run_id,
            lease_until="",
            source_location=location,
            target_location=f"{root}gen={generation}/",
            sources=[asdict(s) for s in sources],
            abandoned=abandoned,
            history=previous.history if previous else [],
        )
        self.save(PLANNED)
        self.hook("planned")

    def write(self) -> None:
        journal = self.journal
        assert journal is not None
        merged = write_generation(
            self.s3,
            self.c.bucket,
            journal.source_files,
            self.planner.key(journal.target_location),
            target_file_bytes=self.c.options.target_file_bytes,
        )
        self.hook("outputs_put")
        journal.outputs = merged.outputs
        journal.rows_in, journal.distinct_ops = merged.rows_in, merged.distinct_ops
        journal.rows_out = sum(o["rows"] for o in merged.outputs)
        journal.bytes_in, journal.bytes_out = merged.bytes_in, sum(o["size"] for o in merged.outputs)
        self.save(WRITTEN)
        self.hook("written")

    def verify(self) -> None:
        journal = self.journal
        assert journal is not None
        listed = self.planner.files(self.planner.key(journal.target_location))
        verify_generation(self.s3, self.c.bucket, listed, journal.outputs, journal.distinct_ops)
        self.save(VERIFIED)
        self.hook("verified")

    def swap(self) -> None:
        journal = self.journal
        assert journal is not None
        partition = self.glue.get(self.dt, self.hour)
        if partition is None:
            raise CompactionError("the Glue partition disappeared")
        location = location_of(partition)
        if location != journal.target_location:
            if location != journal.source_location:
                raise CompactionError(f"Glue location moved to {location} since planning")
            current = self.planner.sources(self.dt, self.hour, location)
            planned = journal.source_files
            if current != planned:
                added = sorted({f.key for f in current} - {f.key for f in planned})
                raise SourcesChanged(f"{len(current)} files now, {len(planned)} planned; new: {added[:5]}")
            self.glue.point_at(partition, journal.target_location)
        self.hook("glue_updated")
        journal.swapped_at = iso(self.now)
        journal.delete_after = iso(self.now + timedelta(seconds=self.c.options.grace_s))
        self.save(SWAPPED, hold=False)  # nothing to own while the grace period runs
        self.result.status = "compacted"
        self.result.reason = f"old files are deleted after {journal.delete_after}"
        self.result.files_in, self.result.files_out = len(journal.sources), len(journal.outputs)
        self.result.rows_in, self.result.rows_out = journal.rows_in, journal.rows_out
        self.result.duplicates_dropped = journal.rows_in - journal.distinct_ops
        self.result.bytes_in, self.result.bytes_out = journal.bytes_in, journal.bytes_out
        self.hook("swapped")

    def delete(self) -> None:
        journal = self.journal
        assert journal is not None
        location = self.glue.location(self.dt, self.hour)
        if location != journal.target_location:
            raise CompactionError(
                f"refusing to delete: Glue points at {location}, not {journal.target_location}"
            )
        target = self.planner.key(journal.target_location)
        original = self.planner.original_prefix(self.dt, self.hour)
        old: list[str] = []
        for prefix in journal.abandoned:
            old += [f.key for f in self.planner.files(self.planner.key(prefix))]
        planned = [f.key for f in journal.source_files]
        old += [k for k in planned if not k.startswith(original)]
        deleted = delete_keys(self.s3, self.c.bucket, [k for k in old if not k.startswith(target)])
        self.hook("old_generations_deleted")
        # Done is recorded before the files under ops/ go, so that the partition stays
        # discoverable (by the listing of ops/) until they are gone: a later run deletes any of
        # them left over (see ``go``).
        self.save(DONE, hold=False)
        self.hook("done")
        deleted += delete_keys(self.s3, self.c.bucket, [k for k in planned if k.startswith(original)])
        self.result.files_deleted = deleted
        if self.result.status != "compacted":
            self.result.status, self.result.reason = "cleaned", ""
        else:
            self.result.reason = "old files deleted"
        self.hook("sources_deleted")

    def leftovers(self, files: list[SourceFile], location: str) -> bool:
        """Delete files under ops/ that a done generation already holds (a run stopped between
        recording done and deleting them); ``False`` when any file is new (late)."""
        journal = self.journal
        assert journal is not None
        planned = {(f.key, f.etag) for f in journal.source_files}
        if location != journal.target_location or not {(f.key, f.etag) for f in files} <= planned:
            return False
        self.result.files_deleted = delete_keys(self.s3, self.c.bucket, [f.key for f in files])
        self.result.status, self.result.reason = "cleaned", "deleted files left over by a stopped run"
        return True
