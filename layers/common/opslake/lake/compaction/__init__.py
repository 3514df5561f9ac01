"""Compaction of closed hours of the ``ops`` table: many small batch files become a few large ones.

The writer lands one small Parquet object per partition per SQS batch (tens to thousands an
hour), at least once. Once an hour is old enough that the writer can no longer add to it, the
compactor merges its files into files of up to ``target_file_bytes``, keeps one row per op
(``reporter_id``, ``op_id``: two API keys' ops never collapse into one), and swaps the Glue
partition's location to the new files, so a reader sees either the old files or the new ones,
never both and never neither.

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
``verified`` outputs' footers read back: schema is the ops schema, rows == distinct ops
             (reporter_id, op_id).
``swapped``  Glue partition location points at the generation; old files wait ``grace_s``.
``done``     abandoned and previous generations deleted; the planned files under ``ops/`` are
             deleted right after (a later run deletes any that a stopped run left).

A partition is a candidate when it still has files under ``ops/dt=D/hour=H/`` and its hour
ended at least ``min_age_hours`` ago. That one prefix listing finds new hours, hours whose old
files wait for deletion (the sources under ``ops/`` are deleted last), and late files written
into an hour already compacted (the next generation merges the current compacted files with
them). Only pyarrow and boto3 are used: this runs in the consolidator Lambda.

Modules: ``planner`` (candidates, sources, locations), ``journal`` (the journal and its
conditional writes), ``merge`` (fetch, dedupe, write, verify), ``swap`` (Glue location, deletes),
``compactor`` (:class:`Compactor` and the state machine, with every crash point), ``options``
and ``report``.
"""

from opslake.lake.compaction.compactor import CRASH_POINTS, Compactor
from opslake.lake.compaction.journal import Journal
from opslake.lake.compaction.options import CompactionOptions
from opslake.lake.compaction.planner import SourceFile
from opslake.lake.compaction.report import CompactionReport, PartitionResult

__all__ = [
    "CRASH_POINTS",
    "CompactionOptions",
    "CompactionReport",
    "Compactor",
    "Journal",
    "PartitionResult",
    "SourceFile",
]
