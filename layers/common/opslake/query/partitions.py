"""Which files a query of a partitioned table reads in the embedded engine: Glue's partitions,
listed once and then checked against the files, and one file listing per directory tree.

Glue stays the source of truth for which partitions exist and where their files are. Listing
720 partitions costs about a second against moto (its serializer, not the network), so the full
listing is cached per table for ``ttl_s`` and every query checks the cache against the file
listing it makes anyway:

* a Hive directory (``dt=…/hour=…/``) under the table's location that holds files, which the
  query may read and the cache does not know, is looked up in Glue (``BatchGetPartition``): the
  writer registers a partition before it puts its first file, so a partition added after the
  listing is seen by the next query;
* a cached partition one of whose files has disappeared is looked up again: files disappear only
  when compaction has swapped the partition's location (and deleted the old files after a grace
  period of an hour), or the partition was dropped;
* a change of the table itself (``VersionId``/``UpdateTime``/location) drops the cache, and
  ``ttl_s`` (5 minutes) bounds what no file shows: a partition added at a location outside the
  table's Hive tree (opslake's writer never does that), a partition dropped while its files
  remain, or a location swapped while the old files all remain (those files hold the same ops;
  compaction's grace period, an hour, outlives the TTL by far).

A query whose partition predicates Glue can evaluate lists only what they keep when the cache is
cold (one hour is instant), without filling the cache. Files are listed per directory tree: the
table's Hive subtrees the predicates select (``dt=X/`` for ``dt = 'X'``), plus the locations
outside them, each listed alone when few or under their common directory when many, instead of
one listing per partition (720 ``ListObjectsV2`` calls on S3).
"""

from __future__ import annotations

import bisect
import itertools
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from opslake.query.dialect import Predicate

Places = tuple[tuple[Predicate, ...], ...]
Values = tuple[str, ...]


class ListedFile(NamedTuple):
    """A file as the listing saw it (the modification time tells a rewritten object apart)."""

    path: str
    size: int
    mtime_ns: int


#: How long a table's full partition listing is trusted (checked against the files meanwhile): well
#: under compaction's grace period (an hour), so a swapped location is followed while the old files
#: still exist even if no file of it has gone; long enough that queries minutes apart share it.
DEFAULT_TTL_S = 300.0
#: Partition locations listed one by one when at most this many are outside the listed trees.
SEPARATE_LISTINGS = 8
#: Hive subtrees listed separately at most; more and the table's whole location is listed.
MAX_SUBTREES = 64
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9._-]+")


def storage_path(location: str) -> str:
    """A filesystem path for a Glue location (``s3://b/k/`` → ``b/k`` for pyarrow's S3)."""
    parsed = urlparse(location)
    if parsed.scheme in ("s3", "s3a", "s3n"):
        return f"{parsed.netloc}{parsed.path}".rstrip("/")
    return location.rstrip("/")


def _readable(info: pafs.FileInfo) -> bool:
    return bool(info.type == pafs.FileType.File and info.size and not info.base_name.startswith(("_", ".")))


def _under(path: str, root: str) -> bool:
    return path.startswith(root + "/")


def _common_directory(paths: list[str]) -> str:
    parts = [p.split("/") for p in paths]
    common = []
    for segment in zip(*parts, strict=False):
        if len(set(segment)) != 1:
            break
        common.append(segment[0])
    return "/".join(common)


def glue_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def glue_partition_expression(places: Places | None) -> str | None:
    """A Glue ``GetPartitions`` expression equivalent to the query's partition predicates
    (OR across the places a table is read, AND within one), or ``None`` to list everything."""
    if not places or any(not conjunction for conjunction in places):
        return None
    disjuncts = []
    for conjunction in places:
        terms = []
        for predicate in conjunction:
            if predicate.op == "in":
                terms.append(f"{predicate.column} IN ({', '.join(map(glue_literal, predicate.values))})")
            else:
                terms.append(f"{predicate.column} {predicate.op} {glue_literal(predicate.values[0])}")
        disjuncts.append("(" + " AND ".join(terms) + ")")
    return " OR ".join(disjuncts)


def keeps(places: Places | None, keys: list[str], values: Values) -> bool:
    """Whether a partition may hold rows a query with these partition predicates reads."""
    if not places:
        return True
    partition = dict(zip(keys, values, strict=True))
    return any(
        all(p.holds(partition[p.column]) for p in conjunction if p.column in partition)
        for conjunction in places
    )


def hive_subtrees(root: str, keys: list[str], places: Places | None) -> list[str]:
    """The directories under the table's ``root`` that hold every Hive-laid-out partition the
    predicates keep: ``root/dt=X`` for ``dt = 'X'``, ``root/dt=X/hour=H`` with ``hour`` too, and
    ``root`` itself when some place of the query does not fix the first key."""
    subtrees: set[str] = set()
    for conjunction in places or ((),):
        levels: list[list[str]] = []
        for key in keys:
            fixed = [set(p.values) for p in conjunction if p.column == key and p.op in ("=", "in")]
            if not fixed:
                break
            values = sorted(set.intersection(*fixed))
            if not all(_PLAIN_VALUE.fullmatch(v) for v in values):
                break  # Hive would escape it in the directory name: do not guess the spelling
            levels.append([f"{key}={v}" for v in values])
        if not levels:
            return [root]
        for combination in itertools.product(*levels):
            subtrees.add("/".join([root, *combination]))
            if len(subtrees) > MAX_SUBTREES:
                return [root]
    # dt=X and dt=X/hour=H (two places of one query): the first holds the second
    return sorted(t for t in subtrees if not any(_under(t, other) for other in subtrees))


def _hive_values(path: str, root: str, keys: list[str]) -> Values | None:
    """The partition values a file's Hive directory names (``root/dt=X/hour=H/f``), if any."""
    if not _under(path, root):
        return None
    segments = path[len(root) + 1 :].split("/")
    if len(segments) <= len(keys):
        return None
    values = []
    for key, segment in zip(keys, segments, strict=False):
        name, sep, value = segment.partition("=")
        if not sep or name.lower() != key:
            return None
        values.append(unquote(value))
    return tuple(values)


@dataclass
class _Entry:
    location: str  # the filesystem path of Glue's location
    files: frozenset[str] | None = None  # the files there at the last check (None: not checked yet)


@dataclass
class _Listing:
    token: tuple[str, ...]
    listed_at: float
    entries: dict[Values, _Entry] = field(default_factory=dict)


@dataclass
class Partition:
    """One partition a query reads, with its files."""

    values: Values
    files: list[ListedFile]


class PartitionFiles:
    """Resolves the partitions (and their files) a query reads from Glue and the filesystem;
    thread-safe; one per engine, so its cache lives as long as the engine."""

    def __init__(
        self,
        glue_client: Any,
        filesystem: pafs.FileSystem,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._glue = glue_client
        self._fs = filesystem
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._listings: dict[tuple[str, str], _Listing] = {}

    # -- the filesystem -----------------------------------------------------------------------
    def list_tree(self, path: str) -> list[ListedFile]:
        """Every readable file under ``path`` (one recursive listing; not-found is empty)."""
        selector = pafs.FileSelector(path, recursive=True, allow_not_found=True)
        return sorted(
            ListedFile(info.path, int(info.size), int(info.mtime_ns or 0))
            for info in self._fs.get_file_info(selector)
            if _readable(info)
        )

    def _list_locations(self, locations: Iterable[str], listed: dict[str, list[ListedFile]]) -> None:
        """List the locations not under a tree in ``listed`` yet: each alone when few, else
        their common directory once (compacted partitions share ``ops-compacted/``)."""
        missing = sorted({loc for loc in locations if not any(_under(loc + "/", r) for r in listed)})
        if not missing:
            return
        common = _common_directory(missing)
        if len(missing) <= SEPARATE_LISTINGS or not common:
            for location in missing:
                listed[location] = self.list_tree(location)
        else:
            listed[common] = self.list_tree(common)

    @staticmethod
    def _files_at(location: str, listed: Mapping[str, list[ListedFile]]) -> list[ListedFile]:
        """The files under ``location`` in the listing of the tree that holds it (each listing
        is sorted by path, so this is a range: 720 partitions stay 720 lookups, not 720 scans)."""
        for root, files in listed.items():
            if location == root or _under(location, root):
                prefix = location + "/"
                start = bisect.bisect_left(files, (prefix,))
                end = bisect.bisect_left(files, (location + chr(ord("/") + 1),))
                return files[start:end]
        return []

    # -- Glue ---------------------------------------------------------------------------------
    def _get_partitions(self, database: str, name: str, expression: str | None) -> list[dict[str, Any]]:
        arguments: dict[str, Any] = {
            "DatabaseName": database,
            "TableName": name,
            "ExcludeColumnSchema": True,  # the table's columns are used; real Glue then sends less
            "PaginationConfig": {"PageSize": 1000},  # Glue's largest page: one call for 1,000
        }
        if expression:
            arguments["Expression"] = expression
        pages = self._glue.get_paginator("get_partitions").paginate(**arguments)
        return [partition for page in pages for partition in page.get("Partitions", [])]

    def _batch_get(self, database: str, name: str, wanted: list[Values]) -> dict[Values, str]:
        found: dict[Values, str] = {}
        for start in range(0, len(wanted), 1000):  # BatchGetPartition takes at most 1,000
            response = self._glue.batch_get_partition(
                DatabaseName=database,
                TableName=name,
                PartitionsToGet=[{"Values": list(v)} for v in wanted[start : start + 1000]],
            )
            for partition in response.get("Partitions", []):
                found[tuple(partition["Values"])] = storage_path(partition["StorageDescriptor"]["Location"])
        return found

    # -- resolving ----------------------------------------------------------------------------
    def partitions(self, database: str, table: Mapping[str, Any], places: Places | None) -> list[Partition]:
        """The partitions of ``table`` (Glue's ``GetTable`` answer) the predicates keep, with files."""
        name = str(table["Name"])
        keys = [k["Name"].lower() for k in table.get("PartitionKeys", [])]
        root = storage_path(table["StorageDescriptor"]["Location"])
        token = (str(table.get("VersionId", "")), str(table.get("UpdateTime", "")), root)
        now = self._clock()
        with self._lock:
            listing = self._listings.get((database, name))
        if listing is not None and (listing.token != token or now - listing.listed_at > self.ttl_s):
            listing = None
        expression = glue_partition_expression(places)
        if listing is None and expression:
            # cold and pruned: Glue filters (one hour's partitions are instant); nothing cached
            kept = {
                values: storage_path(p["StorageDescriptor"]["Location"])
                for p in self._get_partitions(database, name, expression)
                if keeps(places, keys, values := tuple(p["Values"]))
            }
            listed: dict[str, list[ListedFile]] = {}
            self._list_locations(kept.values(), listed)
            return [Partition(v, self._files_at(loc, listed)) for v, loc in sorted(kept.items())]
        if listing is None:
            listing = _Listing(token, now)
            for p in self._get_partitions(database, name, None):
                listing.entries[tuple(p["Values"])] = _Entry(storage_path(p["StorageDescriptor"]["Location"]))
            with self._lock:
                self._listings[(database, name)] = listing
        return self._checked(database, name, listing, keys, root, places)

    def _checked(
        self, database: str, name: str, listing: _Listing, keys: list[str], root: str, places: Places | None
    ) -> list[Partition]:
        with self._lock:
            entries = dict(listing.entries)
        kept = {values: entry for values, entry in entries.items() if keeps(places, keys, values)}
        listed: dict[str, list[ListedFile]] = {}
        for subtree in hive_subtrees(root, keys, places):
            listed[subtree] = self.list_tree(subtree)
        self._list_locations((e.location for e in kept.values()), listed)
        # partitions the cache may not know: Hive directories with files the query may read
        unknown = sorted(
            {
                values
                for files in listed.values()
                for path, *_ in files
                if (values := _hive_values(path, root, keys)) is not None
                and values not in entries
                and keeps(places, keys, values)
            }
        )
        # partitions that may have moved or gone: a file seen there before has disappeared
        found = {values: self._files_at(entry.location, listed) for values, entry in kept.items()}
        moved = [
            values
            for values, entry in kept.items()
            if entry.files is not None and not entry.files <= {f.path for f in found[values]}
        ]
        if unknown or moved:
            fresh = self._batch_get(database, name, unknown + moved)
            for values in moved:
                kept.pop(values, None)
                found.pop(values, None)
            for values, location in fresh.items():
                kept[values] = _Entry(location)
            self._list_locations((kept[v].location for v in fresh), listed)
            for values in fresh:
                found[values] = self._files_at(kept[values].location, listed)
            with self._lock:
                for values in moved:
                    listing.entries.pop(values, None)
                listing.entries.update({v: kept[v] for v in fresh})
        with self._lock:
            for values, entry in kept.items():
                entry.files = frozenset(f.path for f in found[values])
        return [Partition(values, found[values]) for values in sorted(kept)]

    def forget(self) -> None:
        """Drop every cached listing (the next query of each table lists Glue again)."""
        with self._lock:
            self._listings.clear()
