"""The embedded engine: Athena SQL on DuckDB over the lake, tables resolved through Glue.

DuckDB's httpfs cannot be installed offline, so Parquet objects are read through a pyarrow
filesystem (S3 on AWS or moto, local files in benchmarks): each table becomes a pyarrow
dataset over the files of the Glue partitions the query's ``dt``/``hour`` predicates keep,
with the Glue columns as its schema (partition keys stay strings) and each partition's values
as constant columns. DuckDB scans those datasets lazily (projection and filter pushdown).
Which partitions and files: :mod:`opslake.query.partitions` (Glue's listing kept and checked
against one file listing per tree). Fragments are reused across queries, so each file's footer
is read once. A Glue view (Athena's "Presto view") is expanded from its SQL, its partition
predicates carried into the table under it where it passes ``dt``/``hour`` through
(:mod:`opslake.query.viewsql`), and its stored columns checked against its query as Athena does.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from opslake.lake import schema as lake_schema
from opslake.lake.views import ViewError, is_view, view_definition
from opslake.query.base import (
    Column,
    QueryEngine,
    QueryFailedError,
    QueryResult,
    QueryTimeoutError,
)
from opslake.query.dialect import Predicate, TableRef, TranspiledQuery, to_duckdb
from opslake.query.partitions import (
    DEFAULT_TTL_S,
    ListedFile,
    PartitionFiles,
    Places,
    glue_partition_expression,  # noqa: F401  (re-exported: it lived here)
    storage_path,
)
from opslake.query.viewsql import (
    joined_tables,
    passthrough_columns,
    push_down,
    qualify_tables,
    stale_view_message,
)

if TYPE_CHECKING:
    from opslake.config import Settings


def arrow_type(glue_type: str) -> pa.DataType:
    """The Arrow type of a Glue column (the lake's one type map), or a NOT_SUPPORTED failure."""
    try:
        return lake_schema.arrow_type(glue_type)
    except TypeError:
        raise QueryFailedError(
            f"NOT_SUPPORTED: Glue column type {glue_type!r} is not supported locally"
        ) from None


_DUCKDB_SIMPLE_TYPES = {
    "VARCHAR": "varchar",
    "BIGINT": "bigint",
    "HUGEINT": "bigint",  # DuckDB sums integers into HUGEINT; Athena's sum is bigint
    "UBIGINT": "bigint",
    "INTEGER": "integer",
    "UINTEGER": "bigint",
    "SMALLINT": "smallint",
    "TINYINT": "tinyint",
    "DOUBLE": "double",
    "FLOAT": "real",
    "BOOLEAN": "boolean",
    "DATE": "date",
    "TIME": "time",
    "TIMESTAMP": "timestamp",
    "TIMESTAMP_S": "timestamp",
    "TIMESTAMP_MS": "timestamp",
    "TIMESTAMP_NS": "timestamp",
    "TIMESTAMP WITH TIME ZONE": "timestamp with time zone",
    "INTERVAL": "interval day to second",
    "BLOB": "varbinary",
    "UUID": "uuid",
    "JSON": "json",
    '"NULL"': "unknown",
    "NULL": "unknown",
}


def athena_type(duckdb_type: str) -> str:
    """Athena's name for a DuckDB result type (``VARCHAR[]`` → ``array(varchar)``)."""
    text = duckdb_type.strip()
    if text in _DUCKDB_SIMPLE_TYPES:
        return _DUCKDB_SIMPLE_TYPES[text]
    if text.endswith("[]"):
        return f"array({athena_type(text[:-2])})"
    if match := re.fullmatch(r"DECIMAL\((\d+),\s*(\d+)\)", text):
        return f"decimal({match[1]},{match[2]})"
    if text.startswith("MAP(") and text.endswith(")"):
        key, value = lake_schema.split_top_level(text[4:-1])
        return f"map({athena_type(key)}, {athena_type(value)})"
    if text.startswith("STRUCT(") and text.endswith(")"):
        fields = []
        for part in lake_schema.split_top_level(text[7:-1]):
            name, _, kind = part.partition(" ")
            fields.append(f"{name.strip(chr(34))} {athena_type(kind)}")
        return f"row({', '.join(fields)})"
    return text.lower()


def _python(value: Any, kind: str) -> Any:
    if kind == "bigint" and isinstance(value, Decimal):
        return int(value)
    return value


#: How far pyarrow reads ahead of DuckDB when it scans a table. DuckDB asks a registered dataset for
#: its scanner with only the columns and filter it pushes down, so pyarrow's defaults would apply: 4
#: files at once and 16 batches of 131,072 rows ahead within a file. Arrow's Parquet reader decodes a
#: row group whole, so up to 4 files × 2M rows would sit decoded while DuckDB works: a footprint that
#: grows with the size of the lake's files, not with the answer (the analyzer's peak over a 10M-op day
#: in hour files: about 130 MB more than with these bounds). Reading files ahead only pays when they
#: are small (a GET's latency against little decoding), so a scan reads ahead as many files as fit in
#: :data:`SCAN_READAHEAD_BYTES` of its largest file's size (1 to 4), and one batch within a file.
SCAN_READAHEAD_BYTES = 4 * 1024 * 1024
MAX_FRAGMENT_READAHEAD = 4  # pyarrow's default
SCAN_BATCH_READAHEAD = 1


def fragment_readahead(sizes: Iterable[int]) -> int:
    """Files a scan reads ahead: as many of the largest of ``sizes`` (bytes) as fit in
    :data:`SCAN_READAHEAD_BYTES`, at least 1 and at most :data:`MAX_FRAGMENT_READAHEAD`."""
    largest = max(sizes, default=0)
    return max(1, min(MAX_FRAGMENT_READAHEAD, SCAN_READAHEAD_BYTES // max(1, largest)))


class _BoundedScanDataset(ds.FileSystemDataset):
    """A Parquet dataset whose scans read ahead at most ``readahead`` files and
    :data:`SCAN_BATCH_READAHEAD` batches. DuckDB builds a registered dataset's scanner through
    ``type(dataset).scanner(dataset, columns=…, filter=…)``, so this keeps its projection and filter
    pushdown and only adds the bounds."""

    readahead = 1

    def scanner(self, *args: Any, **kwargs: Any) -> ds.Scanner:
        kwargs.setdefault("fragment_readahead", self.readahead)
        kwargs.setdefault("batch_readahead", SCAN_BATCH_READAHEAD)
        return super().scanner(*args, **kwargs)


@dataclass
class _Loaded:
    dataset: ds.Dataset
    files: list[tuple[str, int]]


#: Parquet fragments (with their footers once read: ~5 KB serialised for the ops schema, a few
#: times that in memory) kept across queries; beyond, the cache restarts. 10,000 covers a year of
#: compacted hours.
MAX_CACHED_FRAGMENTS = 10_000

#: Views of views are followed this deep (Athena has no limit; a cycle is refused before).
MAX_VIEW_DEPTH = 8

_Key = tuple[str, str]  # (database, table), lower case: one Glue object


@dataclass
class _Plan:
    """What a query reads once views are expanded: base tables with the partition predicates of
    every place they are read (through views too), the views in creation order (each after the
    tables and views it reads), and the names each is known by in the SQL."""

    tables: dict[_Key, dict[str, Any]] = field(default_factory=dict)
    places: dict[_Key, list[tuple[Predicate, ...]]] = field(default_factory=dict)
    views: dict[_Key, _View] = field(default_factory=dict)
    names: dict[_Key, list[TableRef]] = field(default_factory=dict)


@dataclass(frozen=True)
class _View:
    query: TranspiledQuery
    passthrough: frozenset[str]
    columns: list[tuple[str, str]]  # as stored in the view (name, Trino type); empty: not checked
    lookups: frozenset[tuple[str, str]] = frozenset()  # LEFT JOINed tables: (database or '', name)

    def passthrough_for(self, ref: TableRef) -> frozenset[str]:
        """The partition columns pushed into ``ref``: none for a table the view only looks up."""
        looked_up = ((ref.database or "").lower(), ref.name.lower()) in self.lookups
        return frozenset() if looked_up else self.passthrough


#: Athena (Trino) refuses a ``sequence`` (or ``repeat``) of more than 10,000 entries; DuckDB would build
#: it whole in one scalar call that neither ``memory_limit`` bounds nor ``interrupt()`` stops (a
#: 150M-entry sequence: 71-79 s, 14 GB).
MAX_SEQUENCE_ENTRIES = 10_000
_N = f"CAST({MAX_SEQUENCE_ENTRIES} AS BIGINT)"


def _too_long(function: str) -> str:
    return (
        f"error('INVALID_FUNCTION_ARGUMENT: result of {function} function must not have more than "
        f"{MAX_SEQUENCE_ENTRIES} entries')"
    )


def _series_macro(name: str, function: str) -> str:
    """A macro shadowing DuckDB's list builder ``name([a, ]b[, step])`` that fails like Athena when the
    list would pass the bound (written so integer, date and timestamp bounds with an integer or interval
    step all bind). The check sits inside the call's argument so the optimizer cannot fold the whole
    list as a constant before the check runs."""
    err = _too_long(function)
    return (
        f"CREATE MACRO {name}"
        f"(b) AS system.main.{name}(CASE WHEN b > {_N} THEN {err} ELSE b END), "
        f"(a, b) AS system.main.{name}(a, CASE WHEN b >= a + {_N} THEN {err} ELSE b END), "
        f"(a, b, step) AS system.main.{name}(a, CASE "
        f"WHEN a + step > a AND b >= a + step * {_N} THEN {err} "
        f"WHEN a + step < a AND b <= a + step * {_N} THEN {err} ELSE b END, step)"
    )


#: lpad and rpad build their answer in one call outside memory_limit too (1e9 characters: 15 s, 2 GB).
#: A value this long could not be answered anyway (answers are capped at 5 MiB), only measured.
MAX_PADDED_CHARS = 1_048_576


def _pad_macro(name: str) -> str:
    err = f"error('INVALID_FUNCTION_ARGUMENT: {name} size must be at most {MAX_PADDED_CHARS}')"
    size = f"CASE WHEN n > {MAX_PADDED_CHARS} THEN {err} ELSE n END"
    return f"CREATE MACRO {name}(s, n, p) AS system.main.{name}(s, {size}, p)"


# sqlglot writes Athena's sequence as generate_series and passes range and repeat through unchanged.
_LIST_BUILDER_MACROS = [
    _series_macro("generate_series", "sequence"),
    _series_macro("range", "range"),
    f"CREATE MACRO repeat(x, n) AS system.main.repeat(x, CASE WHEN n > {_N} THEN {_too_long('repeat')} ELSE n END)",
    _pad_macro("lpad"),
    _pad_macro("rpad"),
]


def limit_statements(memory_limit_mb: int, threads: int) -> list[str]:
    """The DuckDB settings every connection gets before anyone's SQL runs, ending with the lock that
    keeps the query from changing them: bounded memory and threads, no extension installed or loaded
    on demand, no file or network access (the engine hands DuckDB Arrow data it read with pyarrow)."""
    return [
        f"SET memory_limit = '{int(memory_limit_mb)}MB'",
        f"SET threads = {int(threads)}",
        "SET autoinstall_known_extensions = false",
        "SET autoload_known_extensions = false",
        "SET enable_external_access = false",
        "SET TimeZone = 'UTC'",
        *_LIST_BUILDER_MACROS,
        "SET lock_configuration = true",
    ]


class EmbeddedEngine(QueryEngine):
    """Runs Athena SQL in-process: Glue for the catalog, pyarrow for the files, DuckDB for SQL."""

    name = "embedded"

    def __init__(
        self,
        glue_client: Any,
        filesystem: pafs.FileSystem,
        *,
        database: str,
        memory_limit_mb: int = 1024,
        threads: int = 2,
        partition_cache_s: float = DEFAULT_TTL_S,
    ) -> None:
        self._glue = glue_client
        self._fs = filesystem
        self._partitions = PartitionFiles(glue_client, filesystem, ttl_s=partition_cache_s)
        self._compiled_views: dict[tuple[_Key, str], _View] = {}
        self._fragments: dict[tuple[str, int, int, str], ds.Fragment] = {}
        self.database = database
        self.memory_limit_mb = memory_limit_mb
        self.threads = threads

    @classmethod
    def from_settings(cls, settings: Settings, glue_client: Any = None) -> EmbeddedEngine:
        """An engine for the process's AWS configuration (honours ``AWS_ENDPOINT_URL``, as boto3 does)."""
        import boto3

        from opslake.runtime import boto_config

        session = boto3.session.Session()
        glue = glue_client or session.client("glue", config=boto_config())
        # boto3 resolves AWS_ENDPOINT_URL[_S3]
        endpoint = session.client("s3", config=boto_config()).meta.endpoint_url
        credentials = session.get_credentials()
        frozen = credentials.get_frozen_credentials() if credentials is not None else None
        options: dict[str, Any] = {"region": session.region_name or "us-east-1"}
        if frozen is not None:
            options.update(access_key=frozen.access_key, secret_key=frozen.secret_key)
            if frozen.token:
                options["session_token"] = frozen.token
        parsed = urlparse(endpoint or "")
        if parsed.hostname and not parsed.hostname.endswith("amazonaws.com"):
            options["endpoint_override"] = parsed.netloc
            options["scheme"] = parsed.scheme or "https"
        return cls(
            glue,
            pafs.S3FileSystem(**options),
            database=settings.glue_database,
            memory_limit_mb=settings.embedded_memory_limit_mb,
            threads=settings.embedded_threads,
        )

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A fresh in-memory DuckDB connection with the limits set and locked (see :func:`limit_statements`)."""
        con = duckdb.connect(":memory:")
        try:
            for statement in limit_statements(self.memory_limit_mb, self.threads):
                con.execute(statement)
        except BaseException:
            con.close()
            raise
        return con

    # -- catalog -------------------------------------------------------------------------------
    def _table(self, database: str, name: str) -> dict[str, Any]:
        try:
            return dict(self._glue.get_table(DatabaseName=database, Name=name)["Table"])
        except self._glue.exceptions.EntityNotFoundException:
            raise QueryFailedError(
                f"TABLE_NOT_FOUND: Table 'awsdatacatalog.{database}.{name}' does not exist"
            ) from None

    def _view(self, key: _Key, table: dict[str, Any]) -> _View:
        """A Glue view's SQL transpiled, with the partition columns it passes through."""
        try:
            definition = view_definition(table)
        except ViewError as exc:
            raise QueryFailedError(f"HIVE_INVALID_VIEW_DATA: {exc}") from None
        if definition is None:
            raise QueryFailedError(
                f"NOT_SUPPORTED: view '{key[0]}.{key[1]}' is a Hive view; only Athena (Presto) views are read"
            )
        sql = str(definition["originalSql"])
        schema = str(definition.get("schema") or key[0]).lower()
        if schema != self.database.lower():  # its unqualified tables live in the view's database
            sql = qualify_tables(sql, schema)
        try:
            query = to_duckdb(sql)
        except QueryFailedError as exc:
            raise QueryFailedError(f"view '{key[0]}.{key[1]}': {exc}") from exc
        lookups = joined_tables(sql)
        read = [t for t in query.tables if ((t.database or "").lower(), t.name.lower()) not in lookups]
        passthrough = passthrough_columns(sql) if len(read) == 1 else frozenset()
        columns = [(str(c.get("name")), str(c.get("type"))) for c in definition.get("columns") or []]
        return _View(query, passthrough, columns, lookups)

    def _plan(self, query: TranspiledQuery) -> _Plan:
        """Resolve every table the query names through Glue, expanding views (depth
        :data:`MAX_VIEW_DEPTH`) and carrying partition predicates into the tables under them."""
        plan = _Plan()
        definitions: dict[_Key, dict[str, Any]] = {}
        views: dict[_Key, _View] = {}

        def visit(ref: TableRef, default: str, places: Places, stack: tuple[_Key, ...]) -> None:
            key = ((ref.database or default).lower(), ref.name.lower())
            if ref not in plan.names.setdefault(key, []):
                plan.names[key].append(ref)
            if key not in definitions:
                definitions[key] = self._table(*key)
            table = definitions[key]
            if not is_view(table):
                plan.tables[key] = table
                plan.places.setdefault(key, []).extend(places or ((),))
                return
            if key in stack:
                chain = " -> ".join(".".join(k) for k in (*stack, key))
                raise QueryFailedError(f"VIEW_IS_RECURSIVE: View is recursive: {chain}")
            if len(stack) >= MAX_VIEW_DEPTH:
                raise QueryFailedError(f"NOT_SUPPORTED: views nested deeper than {MAX_VIEW_DEPTH}")
            if key not in views:
                # transpiling a view costs as much as its SQL is long (the failures view: ~0.2 s)
                text = (key, str(table.get("ViewOriginalText")))
                if text not in self._compiled_views:
                    if len(self._compiled_views) >= 256:
                        self._compiled_views.clear()
                    self._compiled_views[text] = self._view(key, table)
                views[key] = self._compiled_views[text]
            view = views[key]
            for base in view.query.tables:
                inner = view.query.predicates.get(base) or ((),)
                pushed = push_down(places or ((),), inner, view.passthrough_for(base))
                visit(base, key[0], pushed, (*stack, key))
            plan.views.setdefault(key, view)

        for ref in query.tables:
            visit(ref, self.database, query.predicates.get(ref) or ((),), ())
        return plan

    def _load(self, key: _Key, table: dict[str, Any], places: Places) -> _Loaded:
        keys = [k["Name"].lower() for k in table.get("PartitionKeys", [])]
        columns = table["StorageDescriptor"].get("Columns", [])
        schema = pa.schema(
            [(c["Name"].lower(), arrow_type(c["Type"])) for c in columns]
            + [
                (k["Name"].lower(), arrow_type(k.get("Type", "string")))
                for k in table.get("PartitionKeys", [])
            ]
        )
        parquet = ds.ParquetFileFormat()
        fragments: list[ds.Fragment] = []
        files: list[tuple[str, int]] = []

        def add(found: list[ListedFile], expression: pc.Expression, *, reuse: bool) -> None:
            for file in found:
                # A fragment remembers its file's footer once scanned: reused by the next query, it
                # spares a footer read per file (on S3, one GET of two). Only for partition files,
                # whose objects are written once under unique names (the mtime and size would
                # still tell a rewrite apart); whole derived tables are rewritten in place.
                cache_key = (file.path, file.size, file.mtime_ns, str(expression))
                fragment = self._fragments.get(cache_key) if reuse else None
                if fragment is None:
                    # the listed size spares pyarrow a HEAD request per file before the footer read
                    fragment = parquet.make_fragment(
                        file.path, self._fs, partition_expression=expression, file_size=file.size
                    )
                    if reuse:
                        if len(self._fragments) >= MAX_CACHED_FRAGMENTS:
                            self._fragments.clear()
                        self._fragments[cache_key] = fragment
                fragments.append(fragment)
                files.append((file.path, file.size))

        if keys:
            for partition in self._partitions.partitions(key[0], table, places):
                expression = pc.scalar(True)
                for name, value in zip(keys, partition.values, strict=True):
                    expression = expression & (pc.field(name) == pa.scalar(value, schema.field(name).type))
                add(partition.files, expression, reuse=True)
        else:
            location = storage_path(table["StorageDescriptor"]["Location"])
            add(self._partitions.list_tree(location), pc.scalar(True), reuse=False)
        dataset = _BoundedScanDataset(fragments, schema=schema, format=parquet, filesystem=self._fs)
        dataset.readahead = fragment_readahead(size for _, size in files)
        return _Loaded(dataset, files)

    @staticmethod
    def _target(con: duckdb.DuckDBPyConnection, ref: TableRef) -> str:
        target = f'"{ref.name}"'
        if ref.database:
            con.execute(f'CREATE SCHEMA IF NOT EXISTS "{ref.database}"')
            target = f'"{ref.database}".{target}'
        return target

    def _check_view(self, con: duckdb.DuckDBPyConnection, key: _Key, view: _View) -> None:
        """Fail as Athena does when the view's stored columns no longer match its query (binds
        the view's query; runs nothing)."""
        if not view.columns:
            return
        try:
            relation = con.sql(view.query.sql)
        except duckdb.Error as exc:
            raise QueryFailedError(f"view '{key[0]}.{key[1]}': {athena_message(exc)}") from exc
        if relation is None:
            return
        actual = [(n, athena_type(str(t))) for n, t in zip(relation.columns, relation.types, strict=True)]
        if message := stale_view_message(f"awsdatacatalog.{key[0]}.{key[1]}", view.columns, actual):
            raise QueryFailedError(message)

    # -- running -------------------------------------------------------------------------------
    def run(self, sql: str, *, timeout_s: float = 60.0) -> QueryResult:
        query_id = str(uuid.uuid4())
        query = to_duckdb(sql)
        plan = self._plan(query)
        con = self.connect()
        try:
            files: list[tuple[str, int]] = []
            for i, (key, table) in enumerate(plan.tables.items()):
                loaded = self._load(key, table, tuple(plan.places[key]))
                files += loaded.files
                arrow_name = f"__opslake_arrow_{i}"
                con.register(arrow_name, loaded.dataset)
                for ref in plan.names[key]:
                    con.execute(
                        f'CREATE OR REPLACE VIEW {self._target(con, ref)} AS SELECT * FROM "{arrow_name}"'
                    )
            for key, view in plan.views.items():
                for ref in plan.names[key]:
                    con.execute(f"CREATE OR REPLACE VIEW {self._target(con, ref)} AS {view.query.sql}")
                self._check_view(con, key, view)
            result = self._execute(con, query.sql, timeout_s, query_id)
            return QueryResult(
                columns=result[0],
                rows=result[1],
                engine=self.name,
                query_id=query_id,
                bytes_scanned=sum(size for _, size in files),
                files_read=sorted(path for path, _ in files),
            )
        finally:
            con.close()

    def _execute(
        self, con: duckdb.DuckDBPyConnection, sql: str, timeout_s: float, query_id: str
    ) -> tuple[list[Column], list[tuple[Any, ...]]]:
        timed_out = threading.Event()

        def interrupt() -> None:
            timed_out.set()
            con.interrupt()

        timer = threading.Timer(timeout_s, interrupt)
        timer.start()
        try:
            relation = con.sql(sql)
            if relation is None:
                raise QueryFailedError("NOT_SUPPORTED: the statement returned no result", query_id=query_id)
            columns = [
                Column(name, athena_type(str(kind)))
                for name, kind in zip(relation.columns, relation.types, strict=True)
            ]
            table = relation.to_arrow_table()
        except duckdb.Error as exc:
            if timed_out.is_set():
                raise QueryTimeoutError(
                    f"Query exhausted its time limit of {timeout_s:g} s and was cancelled", query_id=query_id
                ) from exc
            raise QueryFailedError(athena_message(exc), query_id=query_id) from exc
        finally:
            timer.cancel()
        values = [
            [_python(v, column.type) for v in table.column(i).to_pylist()] for i, column in enumerate(columns)
        ]
        return columns, list(zip(*values, strict=True)) if values else []


def athena_message(exc: Exception) -> str:
    """A DuckDB error in Athena's words where there is a close equivalent."""
    text = str(exc)
    first = text.split("\n", 1)[0]
    if match := re.search(r'Referenced column "([^"]+)" not found', text):
        return f"COLUMN_NOT_FOUND: Column '{match[1]}' cannot be resolved"
    if match := re.search(r"Table with name (\S+) does not exist", text):
        return f"TABLE_NOT_FOUND: Table '{match[1]}' does not exist"
    if match := re.search(r"Function with name (\S+) does not exist", text):
        return f"FUNCTION_NOT_FOUND: Function '{match[1]}' not registered"
    if match := re.search(r'column "([^"]+)" must appear in the GROUP BY clause', text):
        return f"EXPRESSION_NOT_AGGREGATE: '{match[1]}' must be an aggregate expression or appear in GROUP BY clause"
    if isinstance(exc, duckdb.ParserException):
        return f"SYNTAX_ERROR: {first.removeprefix('Parser Error: ')}"
    if "Division by zero" in text:
        return "DIVISION_BY_ZERO: Division by zero"
    if match := re.search(r"(INVALID_CAST_ARGUMENT: .*)", text):
        return match[1]
    return re.sub(r"^[A-Za-z ]+ Error: ", "", first)
