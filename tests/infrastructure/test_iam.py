"""Least privilege, checked on the IAM the SAM translator generates."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.infrastructure

# Allow statements that may use Resource "*": these actions accept no narrower resource.
# (SAM attaches X-Ray and Lambda logging as managed policies today, so none are inline yet.)
STAR_RESOURCE_ACTIONS = {
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
    "cloudwatch:PutMetricData",
}

# AWS managed policies a role may carry, by role. Anything else is a finding.
BASIC = "service-role/AWSLambdaBasicExecutionRole"
XRAY = "AWSXrayWriteOnlyAccess"
ALLOWED_MANAGED = {
    "EventsFunctionRole": {BASIC, XRAY},
    "HealthFunctionRole": {BASIC, XRAY},
    "StatsFunctionRole": {BASIC, XRAY},
    "ProfileFunctionRole": {BASIC, XRAY},
    "SqlFunctionRole": {BASIC, XRAY},
    "LogFunctionRole": {BASIC, XRAY},
    "PlaybooksFunctionRole": {BASIC, XRAY},
    "ModelFunctionRole": {BASIC, XRAY},
    "TablesFunctionRole": {BASIC, XRAY},
    "WorkerFunctionRole": {BASIC, XRAY},
    "MatchFunctionRole": {BASIC, XRAY},
    # Added by SAM for the SQS event source (receive/delete/get attributes).
    "WriterFunctionRole": {BASIC, XRAY, "service-role/AWSLambdaSQSQueueExecutionRole"},
    "ApiGatewayCloudWatchRole": {"service-role/AmazonAPIGatewayPushToCloudWatchLogs"},
}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _policy_name(arn: Any) -> str:
    text = arn.get("Fn::Sub", "") if isinstance(arn, dict) else str(arn)
    return text.split(":policy/", 1)[-1]


def _statements(transformed: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for logical_id, resource in transformed["Resources"].items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::IAM::Role":
            documents = [p["PolicyDocument"] for p in props.get("Policies", [])]
        elif resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            documents = [props["PolicyDocument"]]
        else:
            continue
        for document in documents:
            for statement in _as_list(document["Statement"]):
                yield logical_id, statement


def test_there_are_roles_to_check(transformed: dict[str, Any]) -> None:
    roles = {k for k, v in transformed["Resources"].items() if v["Type"] == "AWS::IAM::Role"}
    assert {"EventsFunctionRole", "HealthFunctionRole", "WriterFunctionRole"} <= roles
    assert len(list(_statements(transformed))) >= 4


def test_no_allow_uses_action_wildcards(transformed: dict[str, Any]) -> None:
    findings = [
        f"{role}: {action}"
        for role, s in _statements(transformed)
        if s["Effect"] == "Allow"
        for action in _as_list(s.get("Action", [])) + _as_list(s.get("NotAction", []))
        if action == "*" or action.endswith(":*")
    ]
    findings += [
        f"{role}: NotAction/NotResource"
        for role, s in _statements(transformed)
        if s["Effect"] == "Allow" and ("NotAction" in s or "NotResource" in s)
    ]
    assert not findings


def test_star_resources_only_for_actions_that_need_them(transformed: dict[str, Any]) -> None:
    findings = [
        f"{role}: {s['Action']}"
        for role, s in _statements(transformed)
        if s["Effect"] == "Allow"
        and "*" in _as_list(s.get("Resource", []))
        and not set(_as_list(s["Action"])) <= STAR_RESOURCE_ACTIONS
    ]
    assert not findings


def test_managed_policies_are_the_expected_ones(transformed: dict[str, Any]) -> None:
    for logical_id, resource in transformed["Resources"].items():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        attached = {_policy_name(a) for a in resource["Properties"].get("ManagedPolicyArns", [])}
        assert attached <= ALLOWED_MANAGED.get(logical_id, set()), f"{logical_id}: {attached}"


def test_health_has_nothing_beyond_basic_execution_and_xray(transformed: dict[str, Any]) -> None:
    role = transformed["Resources"]["HealthFunctionRole"]["Properties"]
    assert not role.get("Policies")
    assert {_policy_name(a) for a in role["ManagedPolicyArns"]} == {BASIC, XRAY}


def test_events_function_may_only_enqueue_and_read_api_keys(transformed: dict[str, Any]) -> None:
    allowed = [
        s for role, s in _statements(transformed) if role == "EventsFunctionRole" and s["Effect"] == "Allow"
    ]
    actions = {a for s in allowed for a in _as_list(s["Action"])}
    assert actions == {"sqs:SendMessage*", "apigateway:GET"}
    (apigw,) = [s for s in allowed if _as_list(s["Action"]) == ["apigateway:GET"]]
    assert apigw["Resource"] == {"Fn::Sub": "arn:${AWS::Partition}:apigateway:${AWS::Region}::/apikeys/*"}
    (sqs,) = [s for s in allowed if _as_list(s["Action"]) == ["sqs:SendMessage*"]]
    assert sqs["Resource"]["Fn::Sub"][1] == {"queueName": {"Fn::GetAtt": ["OpsQueue", "QueueName"]}}


def test_writer_may_only_put_lake_objects_and_register_ops_partitions(transformed: dict[str, Any]) -> None:
    allowed = [
        s for role, s in _statements(transformed) if role == "WriterFunctionRole" and s["Effect"] == "Allow"
    ]
    by_action: dict[str, list[Any]] = {}
    for s in allowed:
        for action in _as_list(s["Action"]):
            by_action.setdefault(action, []).extend(_as_list(s["Resource"]))
    assert by_action.pop("s3:PutObject") == [
        {"Fn::Sub": "${LakeBucket.Arn}/ops/*"},
        {"Fn::Sub": "${LakeBucket.Arn}/rejects/*"},
    ]
    glue_arn = "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:"
    glue_resources = [
        {"Fn::Sub": glue_arn + "catalog"},
        {"Fn::Sub": glue_arn + "database/${GlueDatabase}"},
        {"Fn::Sub": glue_arn + "table/${GlueDatabase}/ops"},
    ]
    glue_actions = {
        "glue:GetTable",
        "glue:GetPartition",
        "glue:GetPartitions",
        "glue:BatchCreatePartition",
        "glue:CreatePartition",
    }
    assert set(by_action) == glue_actions
    assert all(resources == glue_resources for resources in by_action.values())


# GET /stats and GET /profile run Athena queries with their own role: the Athena API on the one
# workgroup, the Glue catalog read-only, reads of ops/ and the query results Athena writes for them.
GLUE_ARN = "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:"
QUERY_FUNCTION_GRANTS = {
    "athena:StartQueryExecution": [
        {
            "Fn::Sub": "arn:${AWS::Partition}:athena:${AWS::Region}:${AWS::AccountId}:workgroup/${AthenaWorkGroup}"
        }
    ],
    "glue:GetDatabase": [
        {"Fn::Sub": GLUE_ARN + "catalog"},
        {"Fn::Sub": GLUE_ARN + "database/${GlueDatabase}"},
        {"Fn::Sub": GLUE_ARN + "table/${GlueDatabase}/*"},
    ],
    "s3:GetObject": [
        {"Fn::Sub": "${LakeBucket.Arn}/ops/*"},
        {"Fn::Sub": "${LakeBucket.Arn}/athena-results/*"},
    ],
    "s3:PutObject": [{"Fn::Sub": "${LakeBucket.Arn}/athena-results/*"}],
    "s3:AbortMultipartUpload": [{"Fn::Sub": "${LakeBucket.Arn}/athena-results/*"}],
    "s3:ListBucket": [{"Fn::GetAtt": ["LakeBucket", "Arn"]}],
    "s3:GetBucketLocation": [{"Fn::GetAtt": ["LakeBucket", "Arn"]}],
}
for _action in ("athena:GetQueryExecution", "athena:GetQueryResults", "athena:StopQueryExecution"):
    QUERY_FUNCTION_GRANTS[_action] = QUERY_FUNCTION_GRANTS["athena:StartQueryExecution"]
for _action in ("glue:GetTable", "glue:GetTables", "glue:GetPartition", "glue:GetPartitions"):
    QUERY_FUNCTION_GRANTS[_action] = QUERY_FUNCTION_GRANTS["glue:GetDatabase"]


@pytest.mark.parametrize("role", ["StatsFunctionRole", "ProfileFunctionRole"])
def test_query_functions_may_only_query_the_workgroup_and_read_the_lake(
    transformed: dict[str, Any], role: str
) -> None:
    allowed = [s for r, s in _statements(transformed) if r == role and s["Effect"] == "Allow"]
    by_action: dict[str, list[Any]] = {}
    for s in allowed:
        for action in _as_list(s["Action"]):
            by_action.setdefault(action, []).extend(_as_list(s["Resource"]))
    assert by_action == QUERY_FUNCTION_GRANTS
    (listing,) = [s for s in allowed if _as_list(s["Action"]) == ["s3:ListBucket"]]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["ops/*", "athena-results/*"]}}
    assert all("Condition" not in s for s in allowed if s is not listing)
    role_props = transformed["Resources"][role]["Properties"]
    assert {_policy_name(a) for a in role_props["ManagedPolicyArns"]} == {BASIC, XRAY}


# ---- gateway tools: POST /sql, POST /log, GET /playbooks, GET /model ---------------------------
# Every gateway tool enqueues its op record and resolves the caller's API key name.
APIKEYS = {"Fn::Sub": "arn:${AWS::Partition}:apigateway:${AWS::Region}::/apikeys/*"}


def _grants(transformed: dict[str, Any], role: str) -> tuple[dict[str, list[Any]], list[dict[str, Any]]]:
    allowed = [s for r, s in _statements(transformed) if r == role and s["Effect"] == "Allow"]
    by_action: dict[str, list[Any]] = {}
    for s in allowed:
        for action in _as_list(s["Action"]):
            by_action.setdefault(action, []).extend(_as_list(s["Resource"]))
    return by_action, allowed


def _pop_observation_grants(by_action: dict[str, list[Any]]) -> None:
    assert by_action.pop("apigateway:GET") == [APIKEYS]
    (sqs,) = by_action.pop("sqs:SendMessage*")
    assert sqs["Fn::Sub"][1] == {"queueName": {"Fn::GetAtt": ["OpsQueue", "QueueName"]}}


def test_sql_function_may_query_the_workgroup_read_datasets_and_ops_and_enqueue(
    transformed: dict[str, Any],
) -> None:
    by_action, allowed = _grants(transformed, "SqlFunctionRole")
    _pop_observation_grants(by_action)
    expected = dict(QUERY_FUNCTION_GRANTS)
    expected["s3:GetObject"] = [
        {"Fn::Sub": "${LakeBucket.Arn}/datasets/*"},
        {"Fn::Sub": "${LakeBucket.Arn}/ops/*"},
        {"Fn::Sub": "${LakeBucket.Arn}/athena-results/*"},
    ]
    assert by_action == expected
    (listing,) = [s for s in allowed if _as_list(s["Action"]) == ["s3:ListBucket"]]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["datasets/*", "ops/*", "athena-results/*"]}}


def test_log_function_may_only_enqueue_and_read_api_keys(transformed: dict[str, Any]) -> None:
    by_action, _ = _grants(transformed, "LogFunctionRole")
    _pop_observation_grants(by_action)
    assert by_action == {}


@pytest.mark.parametrize(
    ("role", "prefix"), [("PlaybooksFunctionRole", "playbooks"), ("ModelFunctionRole", "state")]
)
def test_snapshot_readers_may_only_read_their_prefix_and_enqueue(
    transformed: dict[str, Any], role: str, prefix: str
) -> None:
    by_action, allowed = _grants(transformed, role)
    _pop_observation_grants(by_action)
    assert by_action == {
        "s3:GetObject": [{"Fn::Sub": "${LakeBucket.Arn}/" + prefix + "/*"}],
        "s3:ListBucket": [{"Fn::GetAtt": ["LakeBucket", "Arn"]}],
    }
    (listing,) = [s for s in allowed if _as_list(s["Action"]) == ["s3:ListBucket"]]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": [prefix + "/*"]}}
    # No secrets: /model never reads the LLM's API key.
    assert not [
        a for s in allowed for a in _as_list(s["Action"]) if a.startswith(("ssm:", "secretsmanager:"))
    ]


# ---- data tools: GET /tables, GET /tables/{name}, GET /worker/{id}, POST /match -----------------
def _data_tool_grants(
    transformed: dict[str, Any], role: str
) -> tuple[dict[str, list[Any]], list[dict[str, Any]]]:
    """(resources by action, the Allow statements) of a data tool's role, after checking and
    removing what every observed tool has: send to the ops queue, read API key names."""
    allowed = [s for r, s in _statements(transformed) if r == role and s["Effect"] == "Allow"]
    by_action: dict[str, list[Any]] = {}
    for s in allowed:
        for action in _as_list(s["Action"]):
            by_action.setdefault(action, []).extend(_as_list(s["Resource"]))
    assert by_action.pop("apigateway:GET") == [
        {"Fn::Sub": "arn:${AWS::Partition}:apigateway:${AWS::Region}::/apikeys/*"}
    ]
    (sqs,) = by_action.pop("sqs:SendMessage*")
    assert sqs["Fn::Sub"][1] == {"queueName": {"Fn::GetAtt": ["OpsQueue", "QueueName"]}}
    role_props = transformed["Resources"][role]["Properties"]
    assert {_policy_name(a) for a in role_props["ManagedPolicyArns"]} == {BASIC, XRAY}
    return by_action, allowed


def test_tables_function_may_only_get_tables_of_the_lake_database(transformed: dict[str, Any]) -> None:
    by_action, allowed = _data_tool_grants(transformed, "TablesFunctionRole")
    assert by_action == {"glue:GetTable": QUERY_FUNCTION_GRANTS["glue:GetTable"]}
    assert all("Condition" not in s for s in allowed)


@pytest.mark.parametrize("role", ["WorkerFunctionRole", "MatchFunctionRole"])
def test_worker_and_match_may_query_the_workgroup_and_read_datasets_and_ops(
    transformed: dict[str, Any], role: str
) -> None:
    by_action, allowed = _data_tool_grants(transformed, role)
    expected = dict(QUERY_FUNCTION_GRANTS)
    expected["s3:GetObject"] = [
        {"Fn::Sub": "${LakeBucket.Arn}/datasets/*"},
        {"Fn::Sub": "${LakeBucket.Arn}/ops/*"},
        {"Fn::Sub": "${LakeBucket.Arn}/athena-results/*"},
    ]
    assert by_action == expected
    (listing,) = [s for s in allowed if _as_list(s["Action"]) == ["s3:ListBucket"]]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["datasets/*", "ops/*", "athena-results/*"]}}
    assert all("Condition" not in s for s in allowed if s is not listing)
