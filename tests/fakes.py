"""Small in-memory stand-ins for the project's interfaces: queue, object store, catalog, query engine."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from opslake.errors import LakeWriteError, QueueError
from opslake.lake.catalog import Catalog
from opslake.lake.store import ObjectStore
from opslake.query.base import QueryEngine, QueryResult
from opslake.queue import OpsQueue


class MemoryQueue(OpsQueue):
    def __init__(self, *, fail: bool = False) -> None:
        self.messages: list[str] = []
        self.fail = fail

    def send(self, messages: Sequence[str]) -> None:
        if self.fail:
            raise QueueError("the ops queue did not accept 1 record(s): ServiceUnavailable")
        self.messages.extend(messages)


class MemoryStore(ObjectStore):
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.puts = 0
        self.fail_keys_containing: str | None = None

    def put(self, key: str, data: bytes, *, content_type: str) -> None:
        self.puts += 1
        if self.fail_keys_containing and self.fail_keys_containing in key:
            raise ConnectionError(f"injected failure writing {key}")
        self.objects[key] = data


class MemoryCatalog(Catalog):
    def __init__(self) -> None:
        self.partitions: set[tuple[str, ...]] = set()
        self.fail = False

    def ensure_partitions(self, partitions: Iterable[tuple[str, ...]]) -> None:
        if self.fail:
            raise LakeWriteError("Glue partition registration failed: injected")
        self.partitions.update(partitions)


class FakeEngine(QueryEngine):
    """Answers each query with the next canned result, or raises the canned error; keeps the SQL."""

    name = "athena"

    def __init__(self, *answers: QueryResult | Exception) -> None:
        self.answers = list(answers)
        self.sql: list[str] = []
        self.timeouts: list[float] = []

    def run(self, sql: str, *, timeout_s: float = 60.0) -> QueryResult:
        self.sql.append(sql)
        self.timeouts.append(timeout_s)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
