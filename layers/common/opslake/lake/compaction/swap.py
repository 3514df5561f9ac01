"""Making a generation visible and removing what it replaced: the Glue partition's location, and
batched deletes of old files."""

from __future__ import annotations

import copy
from typing import Any

from botocore.exceptions import ClientError

from opslake.errors import CompactionError
from opslake.lake.conditional import error_code


def location_of(partition: dict[str, Any]) -> str:
    """A Glue partition's location, ending in exactly one ``/``."""
    return str(partition["StorageDescriptor"]["Location"]).rstrip("/") + "/"


class GluePartitions:
    """The ``(dt, hour)`` partitions of one Glue table: read one, point one at a new location."""

    def __init__(self, glue: Any, database: str, table: str) -> None:
        self._glue = glue
        self.database = database
        self.table = table

    def get(self, dt: str, hour: str) -> dict[str, Any] | None:
        try:
            response = self._glue.get_partition(
                DatabaseName=self.database, TableName=self.table, PartitionValues=[dt, hour]
            )
        except ClientError as exc:
            if error_code(exc) == "EntityNotFoundException":
                return None
            raise
        return dict(response["Partition"])

    def location(self, dt: str, hour: str) -> str | None:
        partition = self.get(dt, hour)
        return None if partition is None else location_of(partition)

    def point_at(self, partition: dict[str, Any], location: str) -> None:
        """Update ``partition`` (as read) to ``location``, keeping everything else it had: readers
        that resolve the partition afterwards see only the files under ``location``."""
        descriptor = copy.deepcopy(partition["StorageDescriptor"])
        descriptor["Location"] = location
        partition_input: dict[str, Any] = {"Values": partition["Values"], "StorageDescriptor": descriptor}
        for name in ("Parameters", "LastAccessTime", "LastAnalyzedTime"):
            if name in partition:
                partition_input[name] = partition[name]
        self._glue.update_partition(
            DatabaseName=self.database,
            TableName=self.table,
            PartitionValueList=partition["Values"],
            PartitionInput=partition_input,
        )


def delete_keys(s3: Any, bucket: str, keys: list[str]) -> int:
    """Delete ``keys`` (missing ones are no-ops); how many were asked; raise if S3 refused any."""
    for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
        batch = keys[start : start + 1000]
        response = s3.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
        )
        if response.get("Errors"):
            first = response["Errors"][0]
            raise CompactionError(
                f"{len(response['Errors'])} deletes failed, e.g. {first.get('Key')}: {first.get('Code')}"
            )
    return len(keys)
