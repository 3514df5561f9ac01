"""The Glue ops table matches the writer's Arrow schema and the lake layout; the derived tables
(failures, signatures, diagnoses, playbooks) match opslake.lake.derived."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.infrastructure


@pytest.fixture(scope="module")
def ops_table(resources: dict[str, Any]) -> dict[str, Any]:
    table = resources["OpsTable"]
    assert table["Type"] == "AWS::Glue::Table"
    return table["Properties"]


def test_columns_equal_the_writer_schema_in_order(ops_table: dict[str, Any]) -> None:
    from opslake.lake.schema import glue_columns

    declared = [
        {"Name": c["Name"], "Type": c["Type"]}
        for c in ops_table["TableInput"]["StorageDescriptor"]["Columns"]
    ]
    assert declared == glue_columns()


def test_partition_keys_are_dt_and_hour_strings(ops_table: dict[str, Any]) -> None:
    from opslake.lake.layout import PARTITION_KEYS

    keys = [{"Name": k["Name"], "Type": k["Type"]} for k in ops_table["TableInput"]["PartitionKeys"]]
    assert keys == [{"Name": "dt", "Type": "string"}, {"Name": "hour", "Type": "string"}]
    assert tuple(k["Name"] for k in keys) == PARTITION_KEYS


def test_table_lives_under_the_bucket_ops_prefix_as_parquet(
    ops_table: dict[str, Any], resources: dict[str, Any]
) -> None:
    from opslake.config import Settings

    table_input = ops_table["TableInput"]
    descriptor = table_input["StorageDescriptor"]
    prefix = Settings().ops_prefix
    assert descriptor["Location"] == {"Fn::Sub": f"s3://${{LakeBucket}}/{prefix}"}
    assert resources["LakeBucket"]["Type"] == "AWS::S3::Bucket"
    assert table_input["Name"] == "ops"
    assert ops_table["DatabaseName"] == {"Ref": "GlueDatabase"}
    assert table_input["TableType"] == "EXTERNAL_TABLE"
    assert table_input["Parameters"]["classification"] == "parquet"
    assert descriptor["SerdeInfo"]["SerializationLibrary"] == (
        "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
    )
    assert descriptor["InputFormat"].endswith("MapredParquetInputFormat")
    assert descriptor["OutputFormat"].endswith("MapredParquetOutputFormat")


def test_no_partition_projection(ops_table: dict[str, Any]) -> None:
    """Projection makes Athena ignore partition locations, which compaction swaps (ARCHITECTURE.md)."""
    params = ops_table["TableInput"].get("Parameters", {})
    assert not [k for k in params if k.startswith("projection.")]


def test_functions_name_the_ops_table(functions: dict[str, Any], ops_table: dict[str, Any]) -> None:
    for name, props in functions.items():
        assert props["Environment"]["Variables"]["OPSLAKE_OPS_TABLE"] == ops_table["TableInput"]["Name"], name


# ---- derived tables: what the analyzer and consolidator write -------------------------------------
DERIVED_TABLES = {
    "SignaturesTable": "signatures",
    "SignatureMergesTable": "signature_merges",
    "DiagnosesTable": "diagnoses",
    "PlaybooksTable": "playbooks",
    "PlaybookDeltasTable": "playbook_deltas",
    "ToolCatalogTable": "tool_catalog",
}


def test_every_derived_schema_has_its_table(resources: dict[str, Any]) -> None:
    from opslake.lake.derived import SCHEMAS

    glue_names = [
        r["Properties"]["TableInput"]["Name"] for r in resources.values() if r["Type"] == "AWS::Glue::Table"
    ]
    assert set(DERIVED_TABLES.values()) == set(SCHEMAS)
    assert all(glue_names.count(name) == 1 for name in SCHEMAS), glue_names


@pytest.mark.parametrize(("logical_id", "name"), DERIVED_TABLES.items())
def test_derived_table_matches_its_schema_partitions_and_prefix(
    resources: dict[str, Any], logical_id: str, name: str
) -> None:
    from opslake.lake.derived import PARTITIONED, derived_glue_columns, table_prefix
    from opslake.lake.layout import PARTITION_KEYS

    table = resources[logical_id]
    assert table["Type"] == "AWS::Glue::Table"
    props = table["Properties"]
    table_input = props["TableInput"]
    descriptor = table_input["StorageDescriptor"]
    assert table_input["Name"] == name
    assert props["DatabaseName"] == {"Ref": "GlueDatabase"}
    declared = [{"Name": c["Name"], "Type": c["Type"]} for c in descriptor["Columns"]]
    assert declared == derived_glue_columns(name)
    keys = [{"Name": k["Name"], "Type": k["Type"]} for k in table_input.get("PartitionKeys", [])]
    if name in PARTITIONED:
        assert keys == [{"Name": k, "Type": "string"} for k in PARTITION_KEYS]
    else:
        assert keys == []
    assert table_prefix(name) == f"derived/{name}/"
    assert descriptor["Location"] == {"Fn::Sub": f"s3://${{LakeBucket}}/derived/{name}/"}
    assert table_input["TableType"] == "EXTERNAL_TABLE"
    assert table_input["Parameters"]["classification"] == "parquet"
    assert not [k for k in table_input["Parameters"] if k.startswith("projection.")]
    assert descriptor["SerdeInfo"]["SerializationLibrary"] == (
        "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
    )
    assert descriptor["InputFormat"].endswith("MapredParquetInputFormat")
    assert descriptor["OutputFormat"].endswith("MapredParquetOutputFormat")
