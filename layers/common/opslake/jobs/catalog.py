"""The tool catalog's I/O: the tables and columns the Glue catalog holds, the schemas a team
registered, and the catalog the consolidator publishes for the other jobs and the CLI.

* ``catalog/current.json`` — the catalog as of the consolidator's last run (:class:`ToolCatalog`),
  read by the analyzer (its vocabulary) and ``opslake tools list``;
* ``catalog/declared/<name>.json`` — a registered schema set (``opslake tools register``): the
  declared tools as :class:`ToolStat` objects;
* ``derived/tool_catalog/tool_catalog.parquet`` — the analysts' table (:mod:`opslake.analysis.catalog.export`).

The consolidator keeps the catalog itself in its state (committed with its watermark, so a window
is counted once); these objects are what it publishes after a commit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from opslake.analysis.catalog.export import catalog_rows
from opslake.analysis.catalog.known import Vocabulary
from opslake.lake import derived
from opslake.models.catalog import ToolCatalog, ToolStat

CATALOG_KEY = "catalog/current.json"
DECLARED_PREFIX = "catalog/declared/"
MAX_DECLARED_OBJECTS = 100
MAX_DECLARED_BYTES = 1024 * 1024
_SET_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


def declared_key(name: str) -> str:
    """The object of a registered schema set (a name of ``a-z0-9_-``, at most 63 characters)."""
    if not _SET_NAME.fullmatch(name):
        raise ValueError(f"a schema set's name is 1-63 characters of a-z, 0-9, '_' and '-', got {name!r}")
    return f"{DECLARED_PREFIX}{name}.json"


def vocabulary_read_error(errors: list[str], what: str, exc: Exception) -> None:
    """A part of the vocabulary (the catalog, the Glue tables, the signatures, the registered
    schemas) could not be read: added to the run's ``errors``, logged and counted (metric
    ``CatalogReadErrors``); the run goes on with what it has."""
    from opslake.observability import logger, metrics

    message = f"{what}: {type(exc).__name__}: {exc}"[:500]
    errors.append(message)
    logger.warning("part of the vocabulary could not be read; the run goes on without it", error=message)
    metrics.add_metric(name="CatalogReadErrors", unit="Count", value=1)


def read_tables(glue: Any, database: str) -> dict[str, list[str]]:
    """Every table and view of the Glue database with its columns (partition keys included)."""
    tables: dict[str, list[str]] = {}
    for page in glue.get_paginator("get_tables").paginate(DatabaseName=database):
        for table in page.get("TableList", []):
            storage = table.get("StorageDescriptor") or {}
            columns = [c["Name"] for c in [*storage.get("Columns", []), *table.get("PartitionKeys", [])]]
            tables[table["Name"]] = columns
    return tables


class CatalogStore:
    """Reads and writes the catalog's objects in the lake bucket (an S3 client, passed in)."""

    def __init__(self, s3: Any, bucket: str) -> None:
        self.s3 = s3
        self.bucket = bucket

    def _get(self, key: str) -> bytes | None:
        try:
            return bytes(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except self.s3.exceptions.NoSuchKey:
            return None

    def current(self) -> ToolCatalog:
        """The catalog last published (empty before the consolidator's first run)."""
        data = self._get(CATALOG_KEY)
        return ToolCatalog.model_validate_json(data) if data else ToolCatalog()

    def declared(self) -> list[ToolStat]:
        """Every registered schema set's tools (the first :data:`MAX_DECLARED_OBJECTS` sets)."""
        keys: list[str] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=DECLARED_PREFIX
        ):
            keys += [o["Key"] for o in page.get("Contents", []) if o["Key"].endswith(".json")]
        tools: list[ToolStat] = []
        for key in sorted(keys)[:MAX_DECLARED_OBJECTS]:
            data = self._get(key)
            if data is not None:
                tools += [ToolStat.model_validate(t) for t in json.loads(data)]
        return tools

    def register(self, name: str, tools: Sequence[ToolStat]) -> str:
        """Store a schema set (replacing the set of that name); returns its key."""
        key = declared_key(name)
        body = json.dumps([t.model_dump(mode="json", exclude_defaults=True) for t in tools]).encode()
        if len(body) > MAX_DECLARED_BYTES:
            raise ValueError(f"the schema set is {len(body)} bytes; at most {MAX_DECLARED_BYTES}")
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType="application/json")
        return key

    def publish(self, vocabulary: Vocabulary, now: datetime) -> None:
        """The catalog for the other jobs and the CLI, and the analysts' table."""
        self.s3.put_object(
            Bucket=self.bucket,
            Key=CATALOG_KEY,
            Body=vocabulary.catalog.model_dump_json(exclude_defaults=True).encode(),
            ContentType="application/json",
        )
        self.s3.put_object(
            Bucket=self.bucket,
            Key=derived.whole_table_key("tool_catalog"),
            Body=derived.parquet_bytes("tool_catalog", catalog_rows(vocabulary, now)),
            ContentType="application/vnd.apache.parquet",
        )
