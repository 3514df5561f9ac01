"""The Glue ops table matches the writer's Arrow schema and the lake layout."""

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
