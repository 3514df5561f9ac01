"""``opslake doctor --aws`` on a stack that moto's CloudFormation describes: its outputs name the
bucket and queues, CloudWatch holds its alarms and the queue's age metric (as AWS publishes it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from opslake.config import Settings
from opslake.jobs.lease import RunState
from opslake_local.cli import build_parser, main
from opslake_local.cli.doctor_commands import aws_target
from opslake_local.doctor import check_jobs

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
STACK = "opslake-prod"
REGION = "us-east-1"

# The resources and outputs of template.yaml the doctor reads (moto's CloudFormation has no API
# Gateway stage to point ApiUrl at: these tests leave the api-key, probe and model checks out).
TEMPLATE = {
    "Resources": {
        "LakeBucket": {"Type": "AWS::S3::Bucket"},
        # one of the two jobs, so that the printed command names it (the other stays a placeholder)
        "JobRole": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "lambda.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            },
        },
        "ConsolidatorFunction": {
            "Type": "AWS::Lambda::Function",
            "Properties": {
                "Runtime": "python3.12",
                "Handler": "consolidator.handler",
                "Role": {"Fn::GetAtt": ["JobRole", "Arn"]},
                "Code": {"ZipFile": "def handler(event, context):\n    return {}\n"},
            },
        },
        "OpsDeadLetterQueue": {"Type": "AWS::SQS::Queue"},
        "OpsQueue": {
            "Type": "AWS::SQS::Queue",
            "Properties": {
                "RedrivePolicy": {
                    "deadLetterTargetArn": {"Fn::GetAtt": ["OpsDeadLetterQueue", "Arn"]},
                    "maxReceiveCount": 5,
                }
            },
        },
    },
    "Outputs": {
        "ApiUrl": {"Value": "https://example.execute-api.us-east-1.amazonaws.com/dev"},
        "LakeBucketName": {"Value": {"Ref": "LakeBucket"}},
        "OpsQueueUrl": {"Value": {"Ref": "OpsQueue"}},
        "OpsDeadLetterQueueUrl": {"Value": {"Ref": "OpsDeadLetterQueue"}},
    },
}


@pytest.fixture
def deployed(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        cfn = boto3.client("cloudformation", region_name=REGION)
        cfn.create_stack(StackName=STACK, TemplateBody=json.dumps(TEMPLATE))
        outputs = cfn.describe_stacks(StackName=STACK)["Stacks"][0]["Outputs"]
        yield {o["OutputKey"]: o["OutputValue"] for o in outputs}


def _doctor(capsys: pytest.CaptureFixture[str], only: str) -> tuple[int, dict[str, dict[str, Any]]]:
    capsys.readouterr()
    argv = ["--template", str(ROOT / "template.yaml"), "doctor", "--aws", "--stack-name", STACK]
    code = main([*argv, "--region", REGION, "--only", only, "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return code, {c["name"]: c for c in json.loads(out)}


def test_a_quiet_new_stack(deployed: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, checks = _doctor(capsys, "queue,dlq,jobs,alarms")
    assert code == 0
    assert {n: c["status"] for n, c in checks.items()} == {
        "queue": "ok",
        "dlq": "ok",
        "job:analyzer": "warn",  # deployed a moment ago: the first run is still to come
        "job:consolidator": "warn",
        "alarms": "warn",  # a stack deployed without them
    }
    assert "no CloudWatch alarm named opslake-prod-*" in checks["alarms"]["detail"]
    assert "sam logs --stack-name opslake-prod -n AnalyzerFunction" in checks["job:analyzer"]["fix"]


def test_an_alarm_in_alarm_state_is_named(
    deployed: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    for name in (f"{STACK}-WriterErrors", f"{STACK}-OpsDeadLetterQueueNotEmpty", "other-stack-WriterErrors"):
        cloudwatch.put_metric_alarm(
            AlarmName=name, Namespace="AWS/Lambda", MetricName="Errors", Statistic="Sum", Period=300,
            EvaluationPeriods=1, Threshold=0, ComparisonOperator="GreaterThanThreshold",
        )  # fmt: skip
    cloudwatch.set_alarm_state(AlarmName=f"{STACK}-WriterErrors", StateValue="ALARM", StateReason="3 errors")
    cloudwatch.set_alarm_state(
        AlarmName="other-stack-WriterErrors", StateValue="ALARM", StateReason="not ours"
    )
    code, checks = _doctor(capsys, "alarms")
    assert code == 1
    detail = checks["alarms"]["detail"]
    assert detail == f"1 of 2 alarm(s) in ALARM: {STACK}-WriterErrors (3 errors)"

    cloudwatch.set_alarm_state(AlarmName=f"{STACK}-WriterErrors", StateValue="OK", StateReason="quiet")
    code, checks = _doctor(capsys, "alarms")
    assert code == 0 and checks["alarms"]["status"] == "ok"


def test_an_old_message_on_the_ops_queue_fails(
    deployed: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    queue_name = deployed["OpsQueueUrl"].rsplit("/", 1)[-1]
    boto3.client("cloudwatch", region_name=REGION).put_metric_data(
        Namespace="AWS/SQS",
        MetricData=[
            {
                "MetricName": "ApproximateAgeOfOldestMessage",
                "Dimensions": [{"Name": "QueueName", "Value": queue_name}],
                "Timestamp": datetime.now(UTC) - timedelta(minutes=2),
                "Value": 1200.0,
                "Unit": "Seconds",
            }
        ],
    )
    code, checks = _doctor(capsys, "queue")
    assert code == 1
    assert (
        checks["queue"]["status"] == "FAIL"
        and "the oldest message is 1200 s old" in checks["queue"]["detail"]
    )


def test_a_dlq_message_fails(deployed: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    boto3.client("sqs", region_name=REGION).send_message(
        QueueUrl=deployed["OpsDeadLetterQueueUrl"], MessageBody="x"
    )
    code, checks = _doctor(capsys, "dlq")
    assert code == 1
    assert checks["dlq"]["status"] == "FAIL" and "holds 1 message(s)" in checks["dlq"]["detail"]
    fix = checks["dlq"]["fix"]
    assert "--endpoint-url" not in fix and deployed["OpsDeadLetterQueueUrl"] in fix
    dlq_arn = "arn:aws:sqs:us-east-1:123456789012:" + deployed["OpsDeadLetterQueueUrl"].rsplit("/", 1)[-1]
    assert f"move them back with `aws sqs start-message-move-task --source-arn {dlq_arn}`" in fix


def test_a_stale_job_of_a_stack_running_for_hours_fails(deployed: dict[str, str]) -> None:
    """The deployed target as the CLI builds it, seen three hours after the stack was created (moto's
    stack is created now): the consolidator last committed two hours ago, the analyzer never."""
    args = build_parser().parse_args(
        [
            "--template",
            str(ROOT / "template.yaml"),
            "doctor",
            "--aws",
            "--stack-name",
            STACK,
            "--region",
            REGION,
        ]
    )
    target = aws_target(args)
    later = datetime.now(UTC) + timedelta(hours=3)
    target.clock = lambda: later
    committed = later - timedelta(hours=2)
    boto3.client("s3", region_name=REGION).put_object(
        Bucket=deployed["LakeBucketName"],
        Key=Settings().consolidator_state_key,
        Body=RunState(watermark=committed, committed_at=committed).to_json(),
    )
    analyzer, consolidator = check_jobs(target)
    assert consolidator.status == "FAIL"
    assert "last run committed 2.0 h ago (it runs every 30 min)" in consolidator.detail
    assert (
        consolidator.fix is not None
        and "sam logs --stack-name opslake-prod -n ConsolidatorFunction" in consolidator.fix
    )
    assert (
        analyzer.status == "FAIL"
        and "never completed a run (it runs every 5 min); the stack started 3" in analyzer.detail
    )
    deployed_name = boto3.client("cloudformation", region_name=REGION).describe_stack_resource(
        StackName=STACK, LogicalResourceId="ConsolidatorFunction"
    )["StackResourceDetail"]["PhysicalResourceId"]
    assert f"`aws lambda invoke --function-name {deployed_name} out.json`" in consolidator.fix
    assert analyzer.fix is not None and "--function-name <the deployed AnalyzerFunction>" in analyzer.fix


def test_a_stack_that_is_not_opslake_is_a_clear_error(
    deployed: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="unrelated", TemplateBody=json.dumps({"Resources": {"B": {"Type": "AWS::S3::Bucket"}}})
    )
    assert main(["doctor", "--aws", "--stack-name", "unrelated", "--region", REGION]) == 1
    assert (
        "has no ApiUrl, LakeBucketName, OpsQueueUrl, OpsDeadLetterQueueUrl output(s)"
        in capsys.readouterr().err
    )
    assert main(["doctor", "--aws", "--stack-name", "missing", "--region", REGION]) == 1
    assert "cannot describe stack 'missing'" in capsys.readouterr().err
