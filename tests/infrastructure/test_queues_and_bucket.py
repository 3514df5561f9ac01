"""Queues and the lake bucket: retries that cannot loop forever, encryption, no public access, TLS only."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.infrastructure


def _tls_only(policy_document: dict[str, Any], action: str) -> bool:
    return any(
        s["Effect"] == "Deny"
        and s.get("Principal") in ("*", {"AWS": "*"})
        and action in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
        and s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") in ("false", False)
        for s in policy_document["Statement"]
    )


def test_queue_visibility_outlasts_six_writer_timeouts(
    resources: dict[str, Any], functions: dict[str, Any]
) -> None:
    """AWS guidance for SQS sources: visibility >= 6 x function timeout (+ batching window)."""
    queue = resources["OpsQueue"]["Properties"]
    writer = functions["WriterFunction"]
    window = writer["Events"]["OpsQueueBatch"]["Properties"].get("MaximumBatchingWindowInSeconds", 0)
    assert queue["VisibilityTimeout"] >= 6 * writer["Timeout"] + window


def test_poison_records_reach_the_dead_letter_queue_after_five_receives(resources: dict[str, Any]) -> None:
    redrive = resources["OpsQueue"]["Properties"]["RedrivePolicy"]
    assert redrive["maxReceiveCount"] == 5
    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": ["OpsDeadLetterQueue", "Arn"]}
    ops = resources["OpsQueue"]["Properties"]
    dlq = resources["OpsDeadLetterQueue"]["Properties"]
    assert dlq["MessageRetentionPeriod"] > ops["MessageRetentionPeriod"], "DLQ must keep records longer"


@pytest.mark.parametrize("queue", ["OpsQueue", "OpsDeadLetterQueue"])
def test_queues_are_encrypted_and_tls_only(resources: dict[str, Any], queue: str) -> None:
    props = resources[queue]["Properties"]
    assert props.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in props
    policies = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::SQS::QueuePolicy" and {"Ref": queue} in r["Properties"]["Queues"]
    ]
    assert any(_tls_only(p["PolicyDocument"], "sqs:*") for p in policies), f"{queue} accepts plain HTTP"


def test_bucket_is_encrypted_private_and_owner_enforced(resources: dict[str, Any]) -> None:
    bucket = resources["LakeBucket"]["Properties"]
    rules = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rules and all(
        r["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in ("AES256", "aws:kms") for r in rules
    )
    assert bucket["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert bucket["OwnershipControls"]["Rules"] == [{"ObjectOwnership": "BucketOwnerEnforced"}]


def test_bucket_policy_denies_plain_http(resources: dict[str, Any]) -> None:
    policies = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::S3::BucketPolicy" and r["Properties"]["Bucket"] == {"Ref": "LakeBucket"}
    ]
    assert any(_tls_only(p["PolicyDocument"], "s3:*") for p in policies)


def test_bucket_lifecycle_bounds_what_accumulates(resources: dict[str, Any]) -> None:
    bucket = resources["LakeBucket"]["Properties"]
    assert bucket["VersioningConfiguration"]["Status"] == "Enabled"
    rules = [r for r in bucket["LifecycleConfiguration"]["Rules"] if r["Status"] == "Enabled"]
    by_prefix = {r.get("Prefix"): r for r in rules if "ExpirationInDays" in r}
    assert by_prefix["rejects/"]["ExpirationInDays"] == 30
    assert by_prefix["athena-results/"]["ExpirationInDays"] == 7
    assert "ops/" not in by_prefix and None not in by_prefix, "op records must never expire"
    assert any(r.get("NoncurrentVersionExpiration", {}).get("NoncurrentDays") == 7 for r in rules)
    assert any(r.get("AbortIncompleteMultipartUpload", {}).get("DaysAfterInitiation") == 1 for r in rules)


def test_athena_workgroup_enforces_cutoff_and_encrypted_results(resources: dict[str, Any]) -> None:
    config = resources["AthenaWorkGroup"]["Properties"]["WorkGroupConfiguration"]
    assert config["EnforceWorkGroupConfiguration"] is True
    assert config["BytesScannedCutoffPerQuery"] == {"Ref": "AthenaBytesScannedCutoff"}
    assert config["ResultConfiguration"]["OutputLocation"] == {
        "Fn::Sub": "s3://${LakeBucket}/athena-results/"
    }
    assert config["ResultConfiguration"]["EncryptionConfiguration"]["EncryptionOption"] == "SSE_S3"
