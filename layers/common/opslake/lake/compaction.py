"""Compaction of closed hours of the ``ops`` table: many small batch files become a few large ones.

The writer lands one small Parquet object per partition per SQS batch (tens to thousands an
hour), at least once. Once an hour is old enough that the writer can no longer add to it, the
compactor merges its files into files of up to ``target_file_bytes``, keeps one row per
``op_id``, and swaps the Glue partition's location to the new files, so a reader sees either
the old files or the new ones, never both and never neither.

Layout:

* sources: ``ops/dt=D/hour=H/*`` (the writer's files; readers list a location recursively);
* outputs: ``ops-compacted/dt=D/hour=H/gen=<generation>/part-NNNNN.parquet``: outside ``ops/``
  so no reader can see them before the swap, one folder per generation so that a generation
  is never written into by anyone else;
* journal: ``state/compaction/ops/dt=D/hour=H.json``, a small JSON object updated with
  conditional writes (``IfNoneMatch="*"`` to create, ``IfMatch=<etag>`` to change), so two
  compactors can never both advance one partition.

Journal states (each step is done, then recorded; a rerun redoes or resumes the first step not
recorded; see the ``Compactor`` docstring for every crash point):

``planned``  sources listed (key, size, ETag); a new generation named.
``written``  merged, deduplicated, sorted outputs put under the generation's folder.
``verified`` outputs' footers read back: schema is the ops schema, rows == distinct op_ids.
``swapped``  Glue partition location points at the generation; old files wait ``grace_s``.
``done``     abandoned and previous generations deleted; the planned files under ``ops/`` are
             deleted right after (a later run deletes any that a stopped run left).

A partition is a candidate when it still has files under ``ops/dt=D/hour=H/`` and its hour
ended at least ``min_age_hours`` ago. That one prefix listing finds new hours, hours whose old
files wait for deletion (the sources under ``ops/`` are deleted last), and late files written
into an hour already compacted (the next generation merges the current compacted files with
them). Only pyarrow and boto3 are used: this runs in the consolidator Lambda.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from botocore.exceptions import ClientError

from opslake.errors import CompactionError
from opslake.lake.parquet import COMPRESSION
from opslake.lake.schema import OPS_SCHEMA
from opslake.observability import logger

if TYPE_CHECKING:
    from opslake.config import Settings

MiB = 1024 * 1024

PLANNED, WRITTEN, VERIFIED, SWAPPED, DONE = "planned", "written", "verified", "swapped", "done"
ACTIVE_STATES = (PLANNED, WRITTEN, VERIFIED)

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

_PRECONDITION_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_HISTORY = 20  # journal history entries kept
_FETCH_THREADS = 16


@dataclass(frozen=True)
class CompactionOptions:
    """How the compactor chooses and sizes its work.

    ``min_age_hours`` counts from the END of an hour. It must exceed the longest time the
    writer may still add files to an hour: a message sent in hour H can be redelivered for
    maxReceiveCount 5 x VisibilityTimeout 900 s = 75 min (template.yaml, OpsQueue), plus the
    60 s batching window and the writer's 120 s timeout, i.e. about 78 min after H ends. A file
    written into ``ops/`` after the swap is not lost (the next run finds it and compacts a new
    generation with it) but is invisible to readers until then; 3 h leaves a wide margin.
    """

    min_age_hours: float = 3.0
    target_file_bytes: int = 128 * MiB
    grace_s: float = (
        3600.0  # old files outlive the swap by this much (readers that resolved the old location)
    )
    max_partitions: int = 24  # partitions that do work (write, swap or delete) per run
    lease_s: float = 1800.0  # a compactor owns a partition this long after each step (2x Lambda timeout)
    max_replans: int = 1  # re-plans in one run when sources change under it; then left for the next run


@dataclass(frozen=True)
class SourceFile:
    key: str
    size: int
    etag: str


@dataclass
class Journal:
    """The per-partition state object (JSON in S3)."""

    dt: str
    hour: str
    state: str
    generation: str
    owner: str
    lease_until: str
    source_location: str  # Glue location when planned (ops/ prefix, or a previous generation)
    target_location: str
    sources: list[dict[str, Any]]
    outputs: list[dict[str, Any]] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)  # generation prefixes never made visible
    rows_in: int = 0
    distinct_ops: int = 0
    rows_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    swapped_at: str = ""
    delete_after: str = ""
    last_error: str = ""
    history: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Journal:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def source_files(self) -> list[SourceFile]:
        return [SourceFile(s["key"], int(s["size"]), s["etag"]) for s in self.sources]


@dataclass
class PartitionResult:
    """What one run did to one partition.

    ``status``: ``compacted`` (swapped this run), ``cleaned`` (old files deleted this run),
    ``waiting`` (swapped earlier, old files kept until the grace period ends), ``skipped``
    (nothing to gain or cannot proceed now: see ``reason``), ``busy`` (another compactor owns
    it), ``failed`` (an error: ``reason``; retried next run).
    """

    dt: str
    hour: str
    status: str = ""
    reason: str = ""
    generation: str = ""
    state: str = ""  # journal state at the end of the run
    files_in: int = 0
    files_out: int = 0
    rows_in: int = 0
    rows_out: int = 0
    duplicates_dropped: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    files_deleted: int = 0


@dataclass
class CompactionReport:
    run_id: str
    partitions: list[PartitionResult] = field(default_factory=list)
    deferred: int = 0  # eligible partitions left for the next run (max_partitions reached)

    def _with(self, *statuses: str) -> list[PartitionResult]:
        return [p for p in self.partitions if p.status in statuses]

    @property
    def compacted(self) -> list[PartitionResult]:
        return self._with("compacted")

    @property
    def skipped(self) -> dict[str, str]:
        return {
            f"{p.dt}/{p.hour}": f"{p.status}: {p.reason}" for p in self._with("skipped", "busy", "waiting")
        }

    @property
    def errors(self) -> dict[str, str]:
        return {f"{p.dt}/{p.hour}": p.reason for p in self._with("failed")}

    def total(self, name: str) -> int:
        return sum(int(getattr(p, name)) for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        totals = ("files_in", "files_out", "rows_in", "rows_out", "duplicates_dropped", "bytes_in")
        return {
            "run_id": self.run_id,
            "compacted": len(self.compacted),
            **{name: self.total(name) for name in (*totals, "bytes_out", "files_deleted")},
            "skipped": self.skipped,
            "errors": self.errors,
            "deferred": self.deferred,
            "partitions": [asdict(p) for p in self.partitions],
        }


class _LeaseLost(Exception):
    """A conditional journal write failed: another compactor owns the partition now."""


class _SourcesChanged(Exception):
    """A source file changed, vanished or appeared after planning."""


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text) if text else datetime.min.replace(tzinfo=UTC)


def _code(exc: ClientError) -> str:
    error = exc.response.get("Error", {})
    return str(error.get("Code", "")) or str(
        exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "")
    )


def _dedupe(table: pa.Table) -> pa.Table:
    """One row per op_id: the earliest ``ingested_at``, then the first in source order (sources
    are in key order), as the writer keeps; the result is sorted by (ingested_at, op_id) so that
    row-group statistics prune time ranges well."""
    if table.num_rows == 0:
        return table
    op_ids = table.column("op_id").combine_chunks()
    keys = pa.table(
        {"op_id": op_ids, "ingested_at": table.column("ingested_at"), "row": pa.array(range(table.num_rows))}
    )
    by_op = pc.sort_indices(
        keys, sort_keys=[("op_id", "ascending"), ("ingested_at", "ascending"), ("row", "ascending")]
    )
    ordered = pc.take(op_ids, by_op)
    first = pa.concat_arrays(
        [pa.array([True]), pc.not_equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1))]
    )
    kept = table.take(pc.filter(by_op, first))
    return kept.sort_by([("ingested_at", "ascending"), ("op_id", "ascending")])


def _footer(client: Any, bucket: str, key: str) -> pq.FileMetaData:
    """A Parquet object's footer, read with two ranged GETs (not the whole object)."""
    tail = client.get_object(Bucket=bucket, Key=key, Range="bytes=-8")["Body"].read()
    if len(tail) != 8 or tail[4:] != b"PAR1":
        raise CompactionError(f"s3://{bucket}/{key} is not a Parquet file (no PAR1 footer)")
    length = int.from_bytes(tail[:4], "little")
    footer = client.get_object(Bucket=bucket, Key=key, Range=f"bytes=-{length + 8}")["Body"].read()
    return pq.ParquetFile(pa.BufferReader(footer)).metadata


class Compactor:
    """Compacts closed hours of one partitioned table (see the module docstring).

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
        self.ops_prefix = (ops_prefix or f"{table}/").rstrip("/") + "/"
        self.compacted_prefix = self.ops_prefix.rstrip("/") + "-compacted/"
        self.state_prefix = f"state/compaction/{table}/"
        self._clock = clock or (lambda: datetime.now(UTC))
        self.options = options or CompactionOptions()
        self._hook = hook
        self._key_pattern = re.compile(
            re.escape(self.ops_prefix) + r"dt=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/(.+)"
        )

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
    def _uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _key(self, uri: str) -> str:
        prefix = f"s3://{self.bucket}/"
        if not uri.startswith(prefix):
            raise CompactionError(f"location {uri} is outside the lake bucket {self.bucket}")
        return uri[len(prefix) :]

    def original_prefix(self, dt: str, hour: str) -> str:
        return f"{self.ops_prefix}dt={dt}/hour={hour}/"

    def compacted_root(self, dt: str, hour: str) -> str:
        return f"{self.compacted_prefix}dt={dt}/hour={hour}/"

    def journal_key(self, dt: str, hour: str) -> str:
        return f"{self.state_prefix}dt={dt}/hour={hour}.json"

    # -- running -------------------------------------------------------------------------------
    def run(self) -> CompactionReport:
        """Compact eligible partitions, oldest first; one partition's failure never stops the others."""
        run_id = f"{self._clock():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        report = CompactionReport(run_id)
        worked = 0
        for (dt, hour), files in self._candidates().items():
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

    def _candidates(self) -> dict[tuple[str, str], list[SourceFile]]:
        """Partitions with files under the table's own prefix whose hour ended ``min_age`` ago,
        oldest first. Keys sort chronologically (``dt=YYYY-MM-DD/hour=HH``), so the listing
        stops at the first hour that is too young."""
        now = self._clock()
        newest_start = now - timedelta(hours=1 + self.options.min_age_hours)
        found: dict[tuple[str, str], list[SourceFile]] = {}
        pages = self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.ops_prefix)
        for page in pages:
            for obj in page.get("Contents", []):
                match = self._key_pattern.fullmatch(obj["Key"])
                if match is None:
                    continue
                dt, hour, _ = match.groups()
                start = datetime.strptime(f"{dt} {hour}", "%Y-%m-%d %H").replace(tzinfo=UTC)
                if start > newest_start:
                    return found
                if _readable(obj["Key"], int(obj.get("Size", 0))):
                    found.setdefault((dt, hour), []).append(
                        SourceFile(obj["Key"], int(obj["Size"]), obj["ETag"])
                    )
        return found

    def _list(self, prefix: str) -> list[SourceFile]:
        """The files a reader would read under ``prefix`` (as the embedded engine: recursive,
        non-empty, names not starting with ``_`` or ``.``), in key order."""
        files = []
        pages = self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        for page in pages:
            for obj in page.get("Contents", []):
                if _readable(obj["Key"], int(obj.get("Size", 0))):
                    files.append(SourceFile(obj["Key"], int(obj["Size"]), obj["ETag"]))
        return files

    def _sources(self, dt: str, hour: str, location: str) -> list[SourceFile]:
        """Everything a compacted generation must hold: the partition's current files (a previous
        generation, if any) and every file under its ``ops/`` prefix."""
        original = self.original_prefix(dt, hour)
        files = self._list(original)
        current = self._key(location)
        if current != original:
            files = self._list(current) + files
        return files

    # -- one partition -------------------------------------------------------------------------
    def _partition(self, dt: str, hour: str, files: list[SourceFile], run_id: str) -> PartitionResult:
        result = PartitionResult(dt, hour)
        state = _Run(self, dt, hour, run_id, result)
        try:
            state.go(files)
        except _LeaseLost as exc:
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


def _readable(key: str, size: int) -> bool:
    base = key.rsplit("/", 1)[-1]
    return size > 0 and bool(base) and not base.startswith(("_", "."))


class _Run:
    """One run's work on one partition: a small state machine over its journal."""

    def __init__(
        self, compactor: Compactor, dt: str, hour: str, run_id: str, result: PartitionResult
    ) -> None:
        self.c = compactor
        self.s3 = compactor._s3
        self.dt, self.hour, self.run_id, self.result = dt, hour, run_id, result
        self.journal: Journal | None = None
        self.etag: str | None = None
        self.replans = 0

    @property
    def now(self) -> datetime:
        return self.c._clock()

    def hook(self, point: str) -> None:
        self.c._call_hook(point, self.dt, self.hour)

    # -- journal -------------------------------------------------------------------------------
    def read_journal(self) -> None:
        try:
            response = self.s3.get_object(Bucket=self.c.bucket, Key=self.c.journal_key(self.dt, self.hour))
        except ClientError as exc:
            if _code(exc) in _MISSING_CODES:
                self.journal, self.etag = None, None
                return
            raise
        self.journal = Journal.from_json(json.loads(response["Body"].read()))
        self.etag = response["ETag"]

    def save(self, state: str, *, hold: bool = True) -> None:
        """Record ``state`` with a conditional write; ``hold`` renews the lease, else releases it."""
        assert self.journal is not None
        journal = self.journal
        journal.state = state
        journal.owner = self.run_id
        journal.lease_until = _iso(self.now + timedelta(seconds=self.c.options.lease_s if hold else 0))
        journal.history = [*journal.history, {"state": state, "at": _iso(self.now), "by": self.run_id}][
            -_HISTORY:
        ]
        condition = {"IfMatch": self.etag} if self.etag else {"IfNoneMatch": "*"}
        try:
            response = self.s3.put_object(
                Bucket=self.c.bucket,
                Key=self.c.journal_key(self.dt, self.hour),
                Body=json.dumps(asdict(journal), indent=1).encode(),
                ContentType="application/json",
                **condition,
            )
        except ClientError as exc:
            if _code(exc) in _PRECONDITION_CODES:
                raise _LeaseLost(f"journal changed since read: {_code(exc)}") from exc
            raise
        self.etag = response["ETag"]

    def release(self, error: str) -> None:
        """After a failure, give the partition back at once (best effort) so the next run need
        not wait for the lease to expire."""
        if self.journal is None or self.etag is None or self.journal.state not in ACTIVE_STATES:
            return
        self.journal.last_error = error[:1000]
        try:
            self.save(self.journal.state, hold=False)
        except Exception as exc:  # the lease then simply expires
            logger.warning("could not release compaction lease", dt=self.dt, hour=self.hour, error=str(exc))

    # -- the state machine ---------------------------------------------------------------------
    def go(self, files: list[SourceFile]) -> None:
        self.read_journal()
        location = self.glue_location()
        if location is None:
            self.skip(
                f"not registered in Glue ({len(files)} files under {self.c.original_prefix(self.dt, self.hour)})"
            )
            return
        journal = self.journal
        if journal is not None and journal.state == DONE and self.leftovers(files, location):
            return
        if journal is None or journal.state == DONE:
            if (
                journal is None
                and len(files) == 1
                and location == self.c._uri(self.c.original_prefix(self.dt, self.hour))
            ):
                # The writer already dedupes within a batch: one file has nothing to merge or drop.
                self.skip(f"a single file ({files[0].size} bytes): nothing to merge")
                return
            self.plan(location, abandoned=[])
        elif journal.state in (*ACTIVE_STATES, SWAPPED):
            if _parse(journal.lease_until) > self.now:
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
                    if _parse(journal.delete_after) > self.now:
                        if not self.result.status:
                            self.result.status = "waiting"
                            self.result.reason = f"old files are deleted after {journal.delete_after}"
                        return
                    self.save(SWAPPED)  # take the lease for the deletes
                    self.delete()
                else:
                    return
            except _SourcesChanged as exc:
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
                self.plan(self.glue_location() or journal.source_location, abandoned=abandoned)

    def skip(self, reason: str) -> None:
        self.result.status, self.result.reason = "skipped", reason

    def glue_partition(self) -> dict[str, Any] | None:
        try:
            response = self.c._glue.get_partition(
                DatabaseName=self.c.database, TableName=self.c.table, PartitionValues=[self.dt, self.hour]
            )
        except ClientError as exc:
            if _code(exc) == "EntityNotFoundException":
                return None
            raise
        return dict(response["Partition"])

    def glue_location(self) -> str | None:
        partition = self.glue_partition()
        if partition is None:
            return None
        return str(partition["StorageDescriptor"]["Location"]).rstrip("/") + "/"

    # -- steps ---------------------------------------------------------------------------------
    def plan(self, location: str, *, abandoned: list[str]) -> None:
        original = self.c._uri(self.c.original_prefix(self.dt, self.hour))
        root = self.c._uri(self.c.compacted_root(self.dt, self.hour))
        if location != original and not location.startswith(root):
            raise CompactionError(f"Glue location {location} is neither {original} nor under {root}")
        sources = self.c._sources(self.dt, self.hour, location)
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

    def fetch(self, source: SourceFile) -> pa.Table:
        """One source file as a table, only if it is still the planned object (``IfMatch``)."""
        try:
            response = self.s3.get_object(Bucket=self.c.bucket, Key=source.key, IfMatch=source.etag)
            body = response["Body"].read()
        except ClientError as exc:
            if _code(exc) in _PRECONDITION_CODES | _MISSING_CODES:
                raise _SourcesChanged(f"{source.key}: {_code(exc)}") from exc
            raise
        table = pq.read_table(pa.BufferReader(body))
        if not table.schema.equals(OPS_SCHEMA):
            table = table.select(OPS_SCHEMA.names).cast(OPS_SCHEMA)
        return table

    def write(self) -> None:
        journal = self.journal
        assert journal is not None
        # GETs of small objects are latency-bound: fetch several at once (boto3 clients are
        # thread-safe), keep the planned order (it decides which duplicate is kept).
        with ThreadPoolExecutor(max_workers=_FETCH_THREADS) as pool:
            tables = list(pool.map(self.fetch, journal.source_files))
        merged = pa.concat_tables(tables) if tables else OPS_SCHEMA.empty_table()
        rows_in = merged.num_rows
        bytes_in = sum(s.size for s in journal.source_files)
        kept = _dedupe(merged)
        del merged, tables
        # Rows per file from the observed bytes per row: the small sources compress worse than
        # one large file does, so outputs come out at or below the target, never above it.
        per_row = max(1.0, bytes_in / max(1, rows_in))
        per_file = max(1, int(self.c.options.target_file_bytes / per_row))
        n_files = max(1, -(-kept.num_rows // per_file))
        per_file = max(1, -(-kept.num_rows // n_files))  # even files
        outputs = []
        for index in range(n_files):
            chunk = kept.slice(index * per_file, per_file)
            sink = pa.BufferOutputStream()
            pq.write_table(chunk, sink, compression=COMPRESSION)
            data = sink.getvalue().to_pybytes()
            key = self.c._key(journal.target_location) + f"part-{index:05d}.parquet"
            self.s3.put_object(
                Bucket=self.c.bucket,
                Key=key,
                Body=data,
                ContentType="application/vnd.apache.parquet",
                IfNoneMatch="*",  # a generation's folder is only ever written once
            )
            outputs.append({"key": key, "rows": chunk.num_rows, "size": len(data)})
        self.hook("outputs_put")
        journal.outputs = outputs
        journal.rows_in, journal.distinct_ops = rows_in, kept.num_rows
        journal.rows_out = sum(o["rows"] for o in outputs)
        journal.bytes_in, journal.bytes_out = bytes_in, sum(o["size"] for o in outputs)
        self.save(WRITTEN)
        self.hook("written")

    def verify(self) -> None:
        journal = self.journal
        assert journal is not None
        listed = {f.key: f.size for f in self.c._list(self.c._key(journal.target_location))}
        expected = {o["key"]: o["size"] for o in journal.outputs}
        if listed != expected:
            raise CompactionError(f"generation folder holds {sorted(listed)}, expected {sorted(expected)}")
        rows = 0
        for output in journal.outputs:
            metadata = _footer(self.s3, self.c.bucket, output["key"])
            schema = metadata.schema.to_arrow_schema().remove_metadata()
            if not schema.equals(OPS_SCHEMA):
                raise CompactionError(f"{output['key']} does not have the ops schema: {schema}")
            if metadata.num_rows != output["rows"]:
                raise CompactionError(
                    f"{output['key']} holds {metadata.num_rows} rows, expected {output['rows']}"
                )
            rows += metadata.num_rows
        if rows != journal.distinct_ops:
            raise CompactionError(
                f"outputs hold {rows} rows but the sources hold {journal.distinct_ops} op_ids"
            )
        self.save(VERIFIED)
        self.hook("verified")

    def swap(self) -> None:
        journal = self.journal
        assert journal is not None
        partition = self.glue_partition()
        if partition is None:
            raise CompactionError("the Glue partition disappeared")
        location = str(partition["StorageDescriptor"]["Location"]).rstrip("/") + "/"
        if location != journal.target_location:
            if location != journal.source_location:
                raise CompactionError(f"Glue location moved to {location} since planning")
            current = self.c._sources(self.dt, self.hour, location)
            planned = journal.source_files
            if current != planned:
                added = sorted({f.key for f in current} - {f.key for f in planned})
                raise _SourcesChanged(f"{len(current)} files now, {len(planned)} planned; new: {added[:5]}")
            descriptor = copy.deepcopy(partition["StorageDescriptor"])
            descriptor["Location"] = journal.target_location
            partition_input: dict[str, Any] = {"Values": partition["Values"], "StorageDescriptor": descriptor}
            for name in ("Parameters", "LastAccessTime", "LastAnalyzedTime"):
                if name in partition:
                    partition_input[name] = partition[name]
            self.c._glue.update_partition(
                DatabaseName=self.c.database,
                TableName=self.c.table,
                PartitionValueList=partition["Values"],
                PartitionInput=partition_input,
            )
        self.hook("glue_updated")
        journal.swapped_at = _iso(self.now)
        journal.delete_after = _iso(self.now + timedelta(seconds=self.c.options.grace_s))
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
        location = self.glue_location()
        if location != journal.target_location:
            raise CompactionError(
                f"refusing to delete: Glue points at {location}, not {journal.target_location}"
            )
        target = self.c._key(journal.target_location)
        original = self.c.original_prefix(self.dt, self.hour)
        old: list[str] = []
        for prefix in journal.abandoned:
            old += [f.key for f in self.c._list(self.c._key(prefix))]
        planned = [f.key for f in journal.source_files]
        old += [k for k in planned if not k.startswith(original)]
        deleted = self.delete_keys([k for k in old if not k.startswith(target)])
        self.hook("old_generations_deleted")
        # Done is recorded before the files under ops/ go, so that the partition stays
        # discoverable (by the listing of ops/) until they are gone: a later run deletes any of
        # them left over (see ``go``).
        self.save(DONE, hold=False)
        self.hook("done")
        deleted += self.delete_keys([k for k in planned if k.startswith(original)])
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
        self.result.files_deleted = self.delete_keys([f.key for f in files])
        self.result.status, self.result.reason = "cleaned", "deleted files left over by a stopped run"
        return True

    def delete_keys(self, keys: list[str]) -> int:
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = keys[start : start + 1000]
            response = self.s3.delete_objects(
                Bucket=self.c.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
            )
            if response.get("Errors"):
                first = response["Errors"][0]
                raise CompactionError(
                    f"{len(response['Errors'])} deletes failed, e.g. {first.get('Key')}: {first.get('Code')}"
                )
        return len(keys)
