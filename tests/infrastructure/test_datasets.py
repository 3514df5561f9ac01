"""The sample dataset tables in template.yaml match their Arrow schemas and the configuration."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.infrastructure

DATASET_TABLES = {"WorkersTable": "workers", "PlacementsTable": "placements"}


@pytest.mark.parametrize(("logical_id", "name"), DATASET_TABLES.items())
def test_columns_equal_the_arrow_schema_in_order(
    resources: dict[str, Any], logical_id: str, name: str
) -> None:
    from opslake.datasets.schema import glue_columns

    table = resources[logical_id]
    assert table["Type"] == "AWS::Glue::Table"
    table_input = table["Properties"]["TableInput"]
    declared = [{"Name": c["Name"], "Type": c["Type"]} for c in table_input["StorageDescriptor"]["Columns"]]
    assert table_input["Name"] == name
    assert declared == glue_columns(name)


@pytest.mark.parametrize(("logical_id", "name"), DATASET_TABLES.items())
def test_tables_are_unpartitioned_parquet_under_datasets(
    resources: dict[str, Any], logical_id: str, name: str
) -> None:
    from opslake.datasets.staffing import DESCRIPTIONS
    from opslake_local.dataset import dataset_key

    props = resources[logical_id]["Properties"]
    table_input = props["TableInput"]
    descriptor = table_input["StorageDescriptor"]
    assert props["DatabaseName"] == {"Ref": "GlueDatabase"}
    assert not table_input.get("PartitionKeys")
    assert descriptor["Location"] == {"Fn::Sub": f"s3://${{LakeBucket}}/datasets/{name}/"}
    assert dataset_key(name).startswith(f"datasets/{name}/")
    assert table_input["Parameters"]["classification"] == "parquet"
    assert descriptor["SerdeInfo"]["SerializationLibrary"].endswith("ParquetHiveSerDe")
    assert table_input["Description"] == DESCRIPTIONS[name]


def test_configured_datasets_are_the_template_tables(resources: dict[str, Any]) -> None:
    from opslake.config import Settings

    assert set(Settings().dataset_tables) == set(DATASET_TABLES.values())


@pytest.mark.parametrize(
    ("function", "routes"),
    [
        ("TablesFunction", {("get", "/tables"), ("get", "/tables/{name}")}),
        ("WorkerFunction", {("get", "/worker/{id}")}),
        ("MatchFunction", {("post", "/match")}),
        ("SearchFunction", {("post", "/search")}),
        ("AskFunction", {("post", "/ask")}),
    ],
)
def test_data_tool_routes_are_keyed_and_have_log_groups(
    functions: dict[str, Any], resources: dict[str, Any], function: str, routes: set[tuple[str, str]]
) -> None:
    events = functions[function]["Events"].values()
    assert {(e["Properties"]["Method"], e["Properties"]["Path"]) for e in events} == routes
    assert all(e["Properties"].get("Auth", {}).get("ApiKeyRequired", True) for e in events)
    assert functions[function]["CodeUri"] == "functions/gateway/"
    log_group = resources[f"{function}LogGroup"]["Properties"]
    assert log_group["LogGroupName"] == {"Fn::Sub": f"/aws/lambda/${{{function}}}"}
