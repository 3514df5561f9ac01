"""The Glue catalog: register Hive partitions idempotently.

Partitions are registered (not projected) so that compaction can later swap a partition's
location atomically for readers (see ARCHITECTURE.md).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from opslake.errors import LakeWriteError


class Catalog(ABC):
    @abstractmethod
    def ensure_partitions(self, partitions: Iterable[tuple[str, ...]]) -> None:
        """Make sure each partition (values in partition-key order) is registered; idempotent."""


class GlueCatalog(Catalog):
    """Glue-backed catalog for one table; remembers what it registered for the container's life."""

    def __init__(self, client: Any, database: str, table: str) -> None:
        self._client = client
        self.database = database
        self.table = table
        self._known: set[tuple[str, ...]] = set()
        self._table_sd: dict[str, Any] | None = None
        self._keys: list[str] = []

    def _storage_descriptor(self) -> dict[str, Any]:
        if self._table_sd is None:
            table = self._client.get_table(DatabaseName=self.database, Name=self.table)["Table"]
            self._table_sd = table["StorageDescriptor"]
            self._keys = [k["Name"] for k in table.get("PartitionKeys", [])]
        return self._table_sd

    def partition_location(self, values: tuple[str, ...]) -> str:
        base = self._storage_descriptor()["Location"].rstrip("/")
        return base + "/" + "/".join(f"{k}={v}" for k, v in zip(self._keys, values, strict=True)) + "/"

    def ensure_partitions(self, partitions: Iterable[tuple[str, ...]]) -> None:
        wanted = sorted(set(partitions) - self._known)
        if not wanted:
            return
        try:
            table_sd = self._storage_descriptor()
            inputs = []
            for values in wanted:
                sd = copy.deepcopy(table_sd)
                sd["Location"] = self.partition_location(values)
                inputs.append({"Values": list(values), "StorageDescriptor": sd})
            failed: list[str] = []
            for start in range(0, len(inputs), 100):  # BatchCreatePartition takes at most 100
                response = self._client.batch_create_partition(
                    DatabaseName=self.database,
                    TableName=self.table,
                    PartitionInputList=inputs[start : start + 100],
                )
                for error in response.get("Errors", []):
                    code = error.get("ErrorDetail", {}).get("ErrorCode", "")
                    if code != "AlreadyExistsException":
                        failed.append(f"{error.get('PartitionValues')}: {code} {error.get('ErrorDetail')}")
        except LakeWriteError:
            raise
        except Exception as exc:
            raise LakeWriteError(f"Glue partition registration failed: {type(exc).__name__}: {exc}") from exc
        if failed:
            raise LakeWriteError("Glue refused partitions: " + "; ".join(failed))
        self._known.update(wanted)
