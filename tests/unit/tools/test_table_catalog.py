"""The table catalog (GET /tables, /tables/{name}, POST /ask's plan) when Glue fails: a 503 with
Retry-After when it is throttling or unreachable (transient: botocore's retries are spent), a 502
naming the error otherwise (a permission or a missing database: a deployment problem), never a 500."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber

from opslake.errors import BadGatewayError, ServiceUnavailableError
from opslake.tools.datasets import TableCatalog

pytestmark = pytest.mark.unit

TABLE = {
    "Table": {
        "Name": "workers",
        "DatabaseName": "lake",
        "StorageDescriptor": {"Columns": [{"Name": "worker_id", "Type": "string"}]},
        "PartitionKeys": [],
    }
}


def glue() -> Any:
    return boto3.client("glue", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


@pytest.mark.parametrize(
    "code", ["ThrottlingException", "InternalServiceException", "OperationTimeoutException"]
)
def test_a_transient_glue_failure_is_a_503_with_retry_after(code: str) -> None:
    client = glue()
    with Stubber(client) as stub:
        stub.add_client_error("get_table", code, "Rate exceeded")
        with pytest.raises(ServiceUnavailableError) as raised:
            TableCatalog(client, "lake", ["workers"], retry_after_s=7).tables()
    error = raised.value
    assert (error.status, error.code, error.headers) == (503, "catalog_unavailable", {"Retry-After": "7"})
    assert "Glue" in error.message and code in error.message


def test_glue_out_of_reach_is_a_503() -> None:
    class Unreachable:
        exceptions = glue().exceptions

        def get_table(self, **_: Any) -> Any:
            raise EndpointConnectionError(endpoint_url="https://glue.us-east-1.amazonaws.com")

    with pytest.raises(ServiceUnavailableError) as raised:
        TableCatalog(Unreachable(), "lake", ["workers"]).tables()
    assert raised.value.code == "catalog_unavailable" and "could not be reached" in raised.value.message


def test_a_permanent_glue_failure_is_a_502_naming_it() -> None:
    client = glue()
    with Stubber(client) as stub:
        stub.add_client_error("get_table", "AccessDeniedException", "not authorized to perform glue:GetTable")
        with pytest.raises(BadGatewayError) as raised:
            TableCatalog(client, "lake", ["workers"]).tables()
    assert (raised.value.status, raised.value.code) == (502, "catalog_failed")
    assert "AccessDeniedException" in raised.value.message


def test_a_missing_table_is_skipped_and_the_rest_listed() -> None:
    client = glue()
    with Stubber(client) as stub:
        stub.add_client_error("get_table", "EntityNotFoundException", "no such table")
        stub.add_response("get_table", TABLE)
        found = TableCatalog(client, "lake", ["placements", "workers"]).tables()
    assert list(found) == ["workers"]


def test_a_missing_database_is_a_502_naming_it_not_an_empty_catalog() -> None:
    """Glue answers GetTable in a database that does not exist with the same EntityNotFoundException
    as a missing table ("Database lake not found."): every table was skipped, so a misconfigured
    database was an empty catalog (GET /tables [], /ask 'available tables: (none)'), not a 502."""
    client = glue()
    with Stubber(client) as stub:
        stub.add_client_error("get_table", "EntityNotFoundException", "Database lake not found.")
        with pytest.raises(BadGatewayError) as raised:
            TableCatalog(client, "lake", ["workers"]).tables()
    assert (raised.value.status, raised.value.code) == (502, "catalog_failed")
    assert "lake" in raised.value.message and "not found" in raised.value.message
