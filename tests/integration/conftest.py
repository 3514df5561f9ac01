"""Shared integration fixtures: a moto account with the observer's resources, and a local stack."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
import httpx
import pytest
from moto import mock_aws

from opslake.lake.schema import glue_columns
from opslake.queue import unpack
from opslake_local.drain import Drainer
from opslake_local.http import LocalApi
from opslake_local.stack import QUIET_ENV, LocalStack
from tests.integration.jobs_support import jobs_lake, jobs_stack  # noqa: F401  (fixtures of the scheduled-job tests)

BUCKET = "opslake-test-lake"
DATABASE = "opslake_test"


@dataclass
class Aws:
    s3: Any
    sqs: Any
    glue: Any
    apigateway: Any
    queue_url: str
    dlq_url: str
    key_id: str
    key_name: str

    def env(self) -> dict[str, str]:
        return {
            "OPSLAKE_LAKE_BUCKET": BUCKET,
            "OPSLAKE_OPS_QUEUE_URL": self.queue_url,
            "OPSLAKE_GLUE_DATABASE": DATABASE,
            "OPSLAKE_OPS_TABLE": "ops",
        }

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))

    def read(self, key: str) -> bytes:
        return bytes(self.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())

    def receive_all(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        while batch := self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"]
        ).get("Messages"):
            messages.extend(batch)
        return messages

    def receive_records(self) -> list[str]:
        """Every op record on the queue, unpacked from its messages (several per message)."""
        return [record for message in self.receive_all() for record in unpack(message["Body"])]


@pytest.fixture
def aws() -> Iterator[Aws]:
    with mock_aws():
        s3, sqs, glue, apigw = (boto3.client(name) for name in ("s3", "sqs", "glue", "apigateway"))
        s3.create_bucket(Bucket=BUCKET)
        dlq_url = sqs.create_queue(QueueName="opslake-ops-dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        queue_url = sqs.create_queue(
            QueueName="opslake-ops",
            Attributes={"RedrivePolicy": f'{{"deadLetterTargetArn": "{dlq_arn}", "maxReceiveCount": "5"}}'},
        )["QueueUrl"]
        glue.create_database(DatabaseInput={"Name": DATABASE})
        glue.create_table(
            DatabaseName=DATABASE,
            TableInput={
                "Name": "ops",
                "TableType": "EXTERNAL_TABLE",
                "PartitionKeys": [{"Name": "dt", "Type": "string"}, {"Name": "hour", "Type": "string"}],
                "StorageDescriptor": {
                    "Columns": glue_columns(),
                    "Location": f"s3://{BUCKET}/ops/",
                    "InputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
                    "OutputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
                    "SerdeInfo": {
                        "SerializationLibrary": "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
                    },
                },
            },
        )
        key = apigw.create_api_key(name="runtime-alpha", enabled=True, value="k" * 40)
        yield Aws(s3, sqs, glue, apigw, queue_url, dlq_url, key["id"], "runtime-alpha")


@contextmanager
def local_stack(**env: str) -> Iterator[tuple[LocalStack, httpx.Client, Drainer]]:
    """A local stack (moto server from template.yaml, embedded engine) with its HTTP API; ``env``
    adds to every function's environment (e.g. a fake model's OPSLAKE_LLM_BASE_URL)."""
    from opslake_local.stack import LocalStack as _LocalStack

    with _LocalStack(env_overrides={**QUIET_ENV, "OPSLAKE_QUERY_ENGINE": "embedded", **env}) as stack:
        invoker = stack.invoker()
        api = LocalApi(stack, invoker)
        base_url = api.start()
        try:
            with httpx.Client(base_url=base_url, timeout=60) as client:
                yield stack, client, Drainer(stack, invoker)
        finally:
            api.stop()


@pytest.fixture(scope="module")
def local() -> Iterator[tuple[LocalStack, httpx.Client, Drainer]]:
    """A local stack (moto server from template.yaml, embedded engine) with its HTTP API, per module."""
    with local_stack() as parts:
        yield parts
