"""Glue views in the format Athena writes for ``CREATE VIEW`` (a "Presto view"), so that one
definition serves Athena on AWS and the embedded engine of the local stack.

Athena stores a view as a Glue table of type ``VIRTUAL_VIEW`` with the parameters
``presto_view=true`` and ``comment=Presto View``; ``ViewOriginalText`` holds
``/* Presto View: <base64 of a JSON document> */`` and ``ViewExpandedText`` the marker
``/* Presto View */``. The JSON is Trino's ``ConnectorViewDefinition``: ``originalSql``,
``catalog`` (``awsdatacatalog``), ``schema`` (the Glue database) and ``columns`` (name and
Trino type). The storage descriptor lists the same columns with Hive types. Followed:
trinodb/trino ``plugin/trino-hive/.../ViewReaderUtil.java`` (``encodeViewData``,
``PrestoViewReader.decodeViewData``, ``isTrinoView``: VIRTUAL_VIEW + presto_view + comment) and
mapbox/cloudfriend ``lib/shortcuts/glue-presto-view.js`` (the Glue TableInput of an Athena view and
its Hive ↔ Trino type spellings).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from opslake.lake.schema import split_top_level

VIEW_PREFIX = "/* Presto View: "
VIEW_SUFFIX = " */"
EXPANDED_MARKER = "/* Presto View */"
CATALOG = "awsdatacatalog"

_HIVE_SIMPLE = {
    "varchar": "string",
    "integer": "int",
    "int": "int",
    "real": "float",
    "varbinary": "binary",
    "bigint": "bigint",
    "smallint": "smallint",
    "tinyint": "tinyint",
    "double": "double",
    "boolean": "boolean",
    "date": "date",
    "timestamp": "timestamp",
    "json": "string",
}


class ViewError(ValueError):
    """A Glue table claims to be a Presto view but its text cannot be decoded."""


def hive_type(trino_type: str) -> str:
    """The Hive (Glue column) spelling of a Trino/Athena type: ``varchar`` → ``string``,
    ``array(row(a varchar))`` → ``array<struct<a:string>>``, ``timestamp(3)`` → ``timestamp``."""
    text = trino_type.strip().lower()
    if text in _HIVE_SIMPLE:
        return _HIVE_SIMPLE[text]
    if re.fullmatch(r"varchar\(\d+\)", text):
        return "string"  # Athena's view columns are unbounded; Hive's varchar(n) would truncate
    if re.fullmatch(r"timestamp\(\d\)(?: with time zone)?|timestamp with time zone", text):
        return "timestamp"
    if re.fullmatch(r"(?:char|decimal)\(\d+(?:,\s*\d+)?\)", text):
        return text.replace(" ", "")
    if text.startswith("array(") and text.endswith(")"):
        return f"array<{hive_type(text[6:-1])}>"
    if text.startswith("map(") and text.endswith(")"):
        key, value = split_top_level(text[4:-1])
        return f"map<{hive_type(key)},{hive_type(value)}>"
    if text.startswith("row(") and text.endswith(")"):
        fields = []
        for part in split_top_level(text[4:-1]):
            name, _, kind = part.strip().partition(" ")
            fields.append(f"{name.strip(chr(34))}:{hive_type(kind)}")
        return f"struct<{','.join(fields)}>"
    raise ValueError(f"no Hive type for the view column type {trino_type!r}")


def _definition(sql: str, schema: str, columns: list[tuple[str, str]]) -> dict[str, Any]:
    # Key order as Athena and Trino write it; the JSON is compared decoded, never as text.
    return {
        "originalSql": sql,
        "catalog": CATALOG,
        "schema": schema,
        "columns": [{"name": name, "type": kind} for name, kind in columns],
    }


def presto_view_input(
    name: str, sql: str, columns: list[tuple[str, str]], *, schema: str = "default"
) -> dict[str, Any]:
    """The Glue ``TableInput`` Athena writes for ``CREATE VIEW name AS sql``: ``columns`` are the
    view's output columns as (name, Trino type) in order; ``schema`` is the view's database
    (unqualified tables in ``sql`` resolve there)."""
    definition = json.dumps(_definition(sql, schema, columns), separators=(",", ":"))
    encoded = base64.b64encode(definition.encode()).decode("ascii")
    return {
        "Name": name,
        "TableType": "VIRTUAL_VIEW",
        "Parameters": {"presto_view": "true", "comment": "Presto View"},
        "ViewOriginalText": f"{VIEW_PREFIX}{encoded}{VIEW_SUFFIX}",
        "ViewExpandedText": EXPANDED_MARKER,
        "PartitionKeys": [],
        "StorageDescriptor": {
            "Columns": [{"Name": column, "Type": hive_type(kind)} for column, kind in columns],
            "SerdeInfo": {},
            "Location": "",
        },
    }


def is_view(table: dict[str, Any]) -> bool:
    """Whether a Glue table (``GetTable``'s ``Table``) is any kind of view."""
    return table.get("TableType") == "VIRTUAL_VIEW"


def is_presto_view(table: dict[str, Any]) -> bool:
    """Whether a Glue table is a view Athena/Trino wrote (as ``isTrinoView`` decides)."""
    parameters = table.get("Parameters") or {}
    return (
        is_view(table)
        and parameters.get("presto_view") == "true"
        and str(parameters.get("comment", "")).lower() == "presto view"
    )


def view_definition(table: dict[str, Any]) -> dict[str, Any] | None:
    """The decoded view JSON (``originalSql``, ``catalog``, ``schema``, ``columns``) of a Presto
    view, ``None`` for anything else; :class:`ViewError` when its text is damaged."""
    if not is_presto_view(table):
        return None
    text = str(table.get("ViewOriginalText") or "")
    if not (text.startswith(VIEW_PREFIX) and text.endswith(VIEW_SUFFIX)):
        raise ViewError(f"view {table.get('Name')!r}: ViewOriginalText lacks the Presto View markers")
    try:
        decoded = json.loads(base64.b64decode(text[len(VIEW_PREFIX) : -len(VIEW_SUFFIX)], validate=True))
    except (binascii.Error, ValueError) as exc:
        raise ViewError(f"view {table.get('Name')!r}: undecodable view text ({exc})") from None
    if not isinstance(decoded, dict) or not isinstance(decoded.get("originalSql"), str):
        raise ViewError(f"view {table.get('Name')!r}: the view text has no originalSql")
    return decoded


def view_sql(table: dict[str, Any]) -> str | None:
    """The SQL of a Presto view (as its author wrote it), ``None`` for anything else."""
    definition = view_definition(table)
    return None if definition is None else str(definition["originalSql"])


def _stored_definition(table: dict[str, Any]) -> dict[str, Any] | None:
    try:
        definition = view_definition(table)
    except ViewError:
        return None  # damaged: rewrite it
    if definition is None:
        return None
    return _definition(
        str(definition.get("originalSql")),
        str(definition.get("schema")),
        [(str(c.get("name")), str(c.get("type"))) for c in definition.get("columns") or []],
    )


def ensure_view(glue_client: Any, database: str, name: str, sql: str, columns: list[tuple[str, str]]) -> bool:
    """Make ``database.name`` the Presto view ``sql`` with ``columns``; True when Glue was written.

    An identical stored view is left alone (no write, no new table version). A different one is
    updated in place. A table of that name that is not a view (the per-op ``failures`` Parquet
    table this view replaces) is deleted first, partitions with it; its S3 objects are not touched.
    """
    table_input = presto_view_input(name, sql, columns, schema=database)
    wanted = _definition(sql, database, columns)
    try:
        current = glue_client.get_table(DatabaseName=database, Name=name)["Table"]
    except glue_client.exceptions.EntityNotFoundException:
        current = None
    if current is not None and is_presto_view(current):
        stored_columns = current.get("StorageDescriptor", {}).get("Columns", [])
        if (
            _stored_definition(current) == wanted
            and stored_columns == table_input["StorageDescriptor"]["Columns"]
        ):
            return False
        glue_client.update_table(DatabaseName=database, TableInput=table_input)
        return True
    if current is not None:
        glue_client.delete_table(DatabaseName=database, Name=name)
    try:
        glue_client.create_table(DatabaseName=database, TableInput=table_input)
    except glue_client.exceptions.AlreadyExistsException:
        # another run created it between our read and our write: make it ours (same definition)
        glue_client.update_table(DatabaseName=database, TableInput=table_input)
    return True
