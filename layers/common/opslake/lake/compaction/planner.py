"""Where a table's files live, which partitions are worth compacting, and what a generation merges.

Sources are listed as a reader sees them (the embedded engine: recursive, non-empty, names not
starting with ``_`` or ``.``), in key order: that order decides which copy of a duplicate is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from opslake.errors import CompactionError


@dataclass(frozen=True)
class SourceFile:
    key: str
    size: int
    etag: str


class SourcesChanged(Exception):
    """A source file changed, vanished or appeared after planning."""


def readable(key: str, size: int) -> bool:
    """Whether a reader would read the object (non-empty, not named ``_*`` or ``.*``)."""
    base = key.rsplit("/", 1)[-1]
    return size > 0 and bool(base) and not base.startswith(("_", "."))


class Planner:
    """The table's prefixes in the lake bucket (``ops/`` and ``ops-compacted/``) and their listings."""

    def __init__(self, s3: Any, bucket: str, ops_prefix: str) -> None:
        self._s3 = s3
        self.bucket = bucket
        self.ops_prefix = ops_prefix
        self.compacted_prefix = ops_prefix.rstrip("/") + "-compacted/"
        self._key_pattern = re.compile(re.escape(ops_prefix) + r"dt=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/(.+)")

    # -- locations -----------------------------------------------------------------------------
    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def key(self, uri: str) -> str:
        prefix = f"s3://{self.bucket}/"
        if not uri.startswith(prefix):
            raise CompactionError(f"location {uri} is outside the lake bucket {self.bucket}")
        return uri[len(prefix) :]

    def original_prefix(self, dt: str, hour: str) -> str:
        return f"{self.ops_prefix}dt={dt}/hour={hour}/"

    def compacted_root(self, dt: str, hour: str) -> str:
        return f"{self.compacted_prefix}dt={dt}/hour={hour}/"

    # -- listings ------------------------------------------------------------------------------
    def candidates(self, now: datetime, min_age_hours: float) -> dict[tuple[str, str], list[SourceFile]]:
        """Partitions with files under the table's own prefix whose hour ended ``min_age`` ago,
        oldest first. Keys sort chronologically (``dt=YYYY-MM-DD/hour=HH``), so the listing
        stops at the first hour that is too young."""
        newest_start = now - timedelta(hours=1 + min_age_hours)
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
                if readable(obj["Key"], int(obj.get("Size", 0))):
                    found.setdefault((dt, hour), []).append(
                        SourceFile(obj["Key"], int(obj["Size"]), obj["ETag"])
                    )
        return found

    def files(self, prefix: str) -> list[SourceFile]:
        """The files a reader would read under ``prefix``, in key order."""
        files = []
        pages = self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        for page in pages:
            for obj in page.get("Contents", []):
                if readable(obj["Key"], int(obj.get("Size", 0))):
                    files.append(SourceFile(obj["Key"], int(obj["Size"]), obj["ETag"]))
        return files

    def sources(self, dt: str, hour: str, location: str) -> list[SourceFile]:
        """Everything a compacted generation must hold: the partition's current files (a previous
        generation, if any) and every file under its ``ops/`` prefix."""
        original = self.original_prefix(dt, hour)
        files = self.files(original)
        current = self.key(location)
        if current != original:
            files = self.files(current) + files
        return files
