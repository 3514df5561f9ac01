"""Least privilege, checked on the IAM the SAM translator generates."""

from __future__ import annotations

import json
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
    "TracesFunctionRole": {BASIC, XRAY},
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
    "SearchFunctionRole": {BASIC, XRAY},
    "McpFunctionRole": {BASIC, XRAY},
    "AskFunctionRole": {BASIC, XRAY},
    "AnalyzerFunctionRole": {BASIC, XRAY},
    "ConsolidatorFunctionRole": {BASIC, XRAY},
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
            # A conditional policy (Fn::If) is checked as if its condition held: the wider case.
            policies = [p["Fn::If"][1] if "Fn::If" in p else p for p in props.get("Policies", [])]
            documents = [p["PolicyDocument"] for p in policies]
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
    """Every role is listed in ALLOWED_MANAGED (a new function must be reviewed here) and carries
    exactly the managed policies listed for it."""
    roles = {k: v for k, v in transformed["Resources"].items() if v["Type"] == "AWS::IAM::Role"}
    assert set(roles) == set(ALLOWED_MANAGED)
    for logical_id, resource in roles.items():
        attached = {_policy_name(a) for a in resource["Properties"].get("ManagedPolicyArns", [])}
        assert attached == ALLOWED_MANAGED[logical_id], f"{logical_id}: {attached}"


def test_health_has_nothing_beyond_basic_execution_and_xray(transformed: dict[str, Any]) -> None:
    role = transformed["Resources"]["HealthFunctionRole"]["Properties"]
    assert not role.get("Policies")
    assert {_policy_name(a) for a in role["ManagedPolicyArns"]} == {BASIC, XRAY}


@pytest.mark.parametrize("role_id", ["EventsFunctionRole", "TracesFunctionRole"])
def test_ingest_functions_may_only_enqueue_and_read_api_keys(
    transformed: dict[str, Any], role_id: str
) -> None:
    """POST /events and POST /v1/traces: the ops queue and the key names, nothing else."""
    allowed = [s for role, s in _statements(transformed) if role == role_id and s["Effect"] == "Allow"]
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
# workgroup, the Glue catalog read-only, reads of ops/ (and of ops-compacted/, where compaction
# moves a closed hour's partition) and the query results Athena writes for them.
GLUE_ARN = "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:"
QUERY_FUNCTION_GRANTS: dict[str, list[Any]] = {
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
        {"Fn::Sub": "${LakeBucket.Arn}/ops-compacted/*"},
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
    assert listing["Condition"] == {
        "StringLike": {"s3:prefix": ["ops/*", "ops-compacted/*", "athena-results/*"]}
    }
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
        {"Fn::Sub": "${LakeBucket.Arn}/ops-compacted/*"},
        {"Fn::Sub": "${LakeBucket.Arn}/athena-results/*"},
    ]
    assert by_action == expected
    (listing,) = [s for s in allowed if _as_list(s["Action"]) == ["s3:ListBucket"]]
    assert listing["Condition"] == {
        "StringLike": {"s3:prefix": ["datasets/*", "ops/*", "ops-compacted/*", "athena-results/*"]}
    }


def test_ask_may_do_what_sql_may_plus_read_the_llm_state_and_its_key(transformed: dict[str, Any]) -> None:
    """POST /ask runs its SQL as POST /sql does (the same guard and allowlist, so the same grants),
    reads the LLM breaker state the analyzer saves (never writes it), and reads the LLM key parameter
    only when one is configured; its model calls are op records (the ops queue it has anyway)."""
    sql, _ = _grants(transformed, "SqlFunctionRole")
    ask, allowed = _grants(transformed, "AskFunctionRole")
    assert ask.pop("ssm:GetParameter") == [LLM_KEY_PARAMETER]
    assert ask.pop("s3:GetObject") == _lake(
        "datasets/*", "ops/*", "ops-compacted/*", "state/llm.json", "athena-results/*"
    )
    assert sql.pop("s3:GetObject") == _lake("datasets/*", "ops/*", "ops-compacted/*", "athena-results/*")
    assert ask == sql
    assert _listing_prefixes(allowed) == [
        "datasets/*",
        "ops/*",
        "ops-compacted/*",
        "state/llm.json",
        "athena-results/*",
    ]
    props = transformed["Resources"]["AskFunctionRole"]["Properties"]
    (conditional,) = [p["Fn::If"] for p in props["Policies"] if "Fn::If" in p]
    assert conditional[0] == "HasLlmApiKeyParameter" and conditional[2] == {"Ref": "AWS::NoValue"}
    assert not [a for a in ask if a.startswith(("secretsmanager:", "kms:"))]
    assert {_policy_name(a) for a in props["ManagedPolicyArns"]} == {BASIC, XRAY}


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
        {"Fn::Sub": "${LakeBucket.Arn}/ops-compacted/*"},
        {"Fn::Sub": "${LakeBucket.Arn}/athena-results/*"},
    ]
    assert by_action == expected
    (listing,) = [s for s in allowed if _as_list(s["Action"]) == ["s3:ListBucket"]]
    assert listing["Condition"] == {
        "StringLike": {"s3:prefix": ["datasets/*", "ops/*", "ops-compacted/*", "athena-results/*"]}
    }
    assert all("Condition" not in s for s in allowed if s is not listing)


def test_search_may_query_the_workgroup_and_read_datasets_and_the_playbook_snapshot_but_not_ops(
    transformed: dict[str, Any],
) -> None:
    """POST /search reads the dataset tables through the engine and the snapshot GET /playbooks
    serves; it never reads ops (its allowlist is the dataset tables of /sql's)."""
    by_action, allowed = _data_tool_grants(transformed, "SearchFunctionRole")
    expected = dict(QUERY_FUNCTION_GRANTS)
    expected["s3:GetObject"] = [
        {"Fn::Sub": "${LakeBucket.Arn}/datasets/*"},
        {"Fn::Sub": "${LakeBucket.Arn}/playbooks/*"},
        {"Fn::Sub": "${LakeBucket.Arn}/athena-results/*"},
    ]
    assert by_action == expected
    (listing,) = [s for s in allowed if _as_list(s["Action"]) == ["s3:ListBucket"]]
    assert listing["Condition"] == {
        "StringLike": {"s3:prefix": ["datasets/*", "playbooks/*", "athena-results/*"]}
    }
    assert all("Condition" not in s for s in allowed if s is not listing)


def test_mcp_function_may_do_what_its_tools_may_and_nothing_more(transformed: dict[str, Any]) -> None:
    """POST /mcp runs each MCP tool's handler in its own process (opslake.tools.mcp.registry), so
    its role is exactly the union of those handlers' roles: a new tool's grants go there too."""
    from opslake.tools.mcp.registry import TOOLS

    union: dict[str, set[str]] = {}
    prefixes: set[str] = set()
    for role in {f"{tool.module.capitalize()}FunctionRole" for tool in TOOLS}:
        by_action, allowed = _grants(transformed, role)
        assert by_action, f"no grants for {role}"
        for action, resources in _canonical(by_action).items():
            union.setdefault(action, set()).update(resources)
        if any(_as_list(s["Action"]) == ["s3:ListBucket"] for s in allowed):
            prefixes.update(_listing_prefixes(allowed))
    by_action, allowed = _grants(transformed, "McpFunctionRole")
    assert {action: set(resources) for action, resources in _canonical(by_action).items()} == union
    assert set(_listing_prefixes(allowed)) == prefixes


# ---- scheduled jobs: AnalyzerFunction (every 5 min), ConsolidatorFunction (every 30 min) --------
ATHENA_WORKGROUP = QUERY_FUNCTION_GRANTS["athena:StartQueryExecution"]
ATHENA_ACTIONS = (
    "athena:StartQueryExecution",
    "athena:GetQueryExecution",
    "athena:GetQueryResults",
    "athena:StopQueryExecution",
)
GLUE_READS = ("glue:GetDatabase", "glue:GetTable", "glue:GetPartition", "glue:GetPartitions")
LLM_KEY_PARAMETER = {
    "Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter${LlmApiKeyParameter}"
}


def _glue(*tables: str) -> list[dict[str, str]]:
    """Glue resources of table-level actions on ``tables``: the catalog, the database, the tables."""
    return [
        {"Fn::Sub": GLUE_ARN + "catalog"},
        {"Fn::Sub": GLUE_ARN + "database/${GlueDatabase}"},
        *({"Fn::Sub": GLUE_ARN + "table/${GlueDatabase}/" + t} for t in tables),
    ]


def _lake(*keys: str) -> list[dict[str, str]]:
    return [{"Fn::Sub": "${LakeBucket.Arn}/" + key} for key in keys]


def _canonical(by_action: dict[str, list[Any]]) -> dict[str, list[str]]:
    """Resources by action, order-free (IAM ignores order) but with duplicates kept."""
    return {a: sorted(json.dumps(r, sort_keys=True) for r in rs) for a, rs in by_action.items()}


def _job_grants(transformed: dict[str, Any], role: str) -> tuple[dict[str, list[Any]], list[dict[str, Any]]]:
    """A job's grants after checking and removing what both jobs have: send to the ops queue (LLM
    calls become op records) and, only when LlmApiKeyParameter is set, read that one parameter."""
    by_action, allowed = _grants(transformed, role)
    (sqs,) = by_action.pop("sqs:SendMessage*")
    assert sqs["Fn::Sub"][1] == {"queueName": {"Fn::GetAtt": ["OpsQueue", "QueueName"]}}
    assert by_action.pop("ssm:GetParameter") == [LLM_KEY_PARAMETER]
    props = transformed["Resources"][role]["Properties"]
    conditional = [p["Fn::If"] for p in props["Policies"] if "Fn::If" in p]
    assert len(conditional) == 1, "exactly one conditional policy: the LLM key parameter"
    condition, then, otherwise = conditional[0]
    assert condition == "HasLlmApiKeyParameter"
    assert otherwise == {"Ref": "AWS::NoValue"}
    assert [a for s in then["PolicyDocument"]["Statement"] for a in _as_list(s["Action"])] == [
        "ssm:GetParameter"
    ]
    unconditional = [
        s for p in props["Policies"] if "Fn::If" not in p for s in p["PolicyDocument"]["Statement"]
    ]
    assert not [s for s in unconditional if "ssm:GetParameter" in _as_list(s["Action"])]
    assert not [a for a in by_action if a.startswith(("ssm:", "secretsmanager:", "kms:"))]
    assert {_policy_name(a) for a in props["ManagedPolicyArns"]} == {BASIC, XRAY}
    return by_action, allowed


def _listing_prefixes(allowed: list[dict[str, Any]]) -> list[str]:
    (listing,) = [s for s in allowed if _as_list(s["Action"]) == ["s3:ListBucket"]]
    assert listing["Resource"] == {"Fn::GetAtt": ["LakeBucket", "Arn"]}
    assert set(listing["Condition"]) == {"StringLike"}
    assert all("Condition" not in s for s in allowed if s is not listing)
    return listing["Condition"]["StringLike"]["s3:prefix"]


# The analyzer: reads ops (raw or compacted) through Athena, writes the signatures and diagnoses
# tables and keeps the failures view (a Glue view over ops: get, create, update, nothing else);
# its own state object and the LLM breaker's.
ANALYZER_GRANTS: dict[str, list[Any]] = {
    **{a: ATHENA_WORKGROUP for a in ATHENA_ACTIONS},
    **{a: _glue("ops") for a in GLUE_READS},
    "glue:GetTable": _glue("ops") + _glue("failures"),
    "glue:CreateTable": _glue("failures"),
    "glue:UpdateTable": _glue("failures"),
    "glue:GetTables": _glue("*"),  # the tables and columns the diagnoser's advice may name
    # derived tables are written, never read back: a rerun overwrites them whole; the tool catalog
    # is the consolidator's, read here
    "s3:GetObject": _lake(
        "ops/*",
        "ops-compacted/*",
        "catalog/current.json",
        "state/analyzer.json",
        "state/llm.json",
        "athena-results/*",
    ),
    "s3:PutObject": _lake(
        "derived/signatures/*",
        "derived/signature_merges/*",
        "derived/diagnoses/*",
        "state/analyzer.json",
        "state/llm.json",
        "athena-results/*",
    ),
    "s3:AbortMultipartUpload": _lake("athena-results/*"),
    "s3:ListBucket": [{"Fn::GetAtt": ["LakeBucket", "Arn"]}],
    "s3:GetBucketLocation": [{"Fn::GetAtt": ["LakeBucket", "Arn"]}],
}


def test_analyzer_may_query_ops_write_its_derived_tables_and_keep_the_failures_view(
    transformed: dict[str, Any],
) -> None:
    by_action, allowed = _job_grants(transformed, "AnalyzerFunctionRole")
    assert _canonical(by_action) == _canonical(ANALYZER_GRANTS)
    assert "s3:DeleteObject" not in by_action  # the analyzer only ever overwrites
    assert not [a for a in by_action if a.startswith("glue:") and "Delete" in a]
    assert _listing_prefixes(allowed) == ["ops/*", "ops-compacted/*", "state/*", "athena-results/*"]


# The consolidator: reads ops and diagnoses through Athena (a failure's signature is computed from
# the op itself and looked up in the analyzer's signature_merges, so neither the failures view nor
# old derived/failures/ objects are read); writes the playbooks table,
# the snapshot GET /playbooks serves and its state; compacts ops (writes ops-compacted/ and its
# journals under state/compaction/, swaps the ops partition's location, deletes the small files).
CONSOLIDATOR_GRANTS: dict[str, list[Any]] = {
    **{a: ATHENA_WORKGROUP for a in ATHENA_ACTIONS},
    **{a: _glue("ops", "diagnoses", "playbooks", "signature_merges", "signatures") for a in GLUE_READS},
    "glue:GetTables": _glue("*"),  # the tables and columns an entry may name, read at run time
    "glue:UpdatePartition": _glue("ops"),
    "s3:GetObject": _lake(
        "derived/diagnoses/*",
        "derived/signature_merges/*",
        "derived/signatures/*",
        "catalog/declared/*",
        "ops/*",
        "ops-compacted/*",
        "state/compaction/*",
        "state/consolidator.json",
        "state/llm.json",
        "athena-results/*",
    ),
    "s3:PutObject": _lake(
        "ops-compacted/*",
        "state/compaction/*",
        "derived/playbooks/*",
        "derived/playbook_deltas/*",
        "playbooks/*",
        "derived/tool_catalog/*",
        "catalog/current.json",
        "state/consolidator.json",
        "state/llm.json",
        "athena-results/*",
    ),
    "s3:DeleteObject": _lake("ops/*", "ops-compacted/*", "state/compaction/*"),
    "s3:AbortMultipartUpload": _lake("athena-results/*"),
    "s3:ListBucket": [{"Fn::GetAtt": ["LakeBucket", "Arn"]}],
    "s3:GetBucketLocation": [{"Fn::GetAtt": ["LakeBucket", "Arn"]}],
}


def test_consolidator_may_query_write_playbooks_and_compact_ops(transformed: dict[str, Any]) -> None:
    by_action, allowed = _job_grants(transformed, "ConsolidatorFunctionRole")
    assert _canonical(by_action) == _canonical(CONSOLIDATOR_GRANTS)
    assert _listing_prefixes(allowed) == [
        "ops/*",
        "ops-compacted/*",
        "derived/diagnoses/*",
        "derived/signatures/*",
        "catalog/declared/*",
        "derived/signature_merges/*",
        "state/*",
        "athena-results/*",
    ]


# ---- across roles: who may change the catalog or delete lake objects ----------------------------
def _tables(resources: list[Any]) -> set[str]:
    """The Glue table names in a list of Glue resources (catalog and database entries dropped)."""
    marker = "table/${GlueDatabase}/"
    return {r["Fn::Sub"].split(marker, 1)[1] for r in resources if marker in r.get("Fn::Sub", "")}


def test_only_the_expected_roles_change_the_catalog_or_delete_lake_objects(
    transformed: dict[str, Any],
) -> None:
    """Writer registers ops partitions, analyzer keeps the failures view, consolidator swaps ops
    partitions (compaction); only the consolidator deletes, and only compaction's objects."""
    found: dict[tuple[str, str], set[str]] = {}
    for role, s in _statements(transformed):
        if s["Effect"] != "Allow":
            continue
        for action in _as_list(s["Action"]):
            resources = _as_list(s["Resource"])
            if action.startswith("glue:") and not action.startswith("glue:Get"):
                found.setdefault((role, action), set()).update(_tables(resources))
            elif action.startswith("s3:Delete"):
                found.setdefault((role, action), set()).update(r["Fn::Sub"] for r in resources)
    assert found == {
        ("WriterFunctionRole", "glue:BatchCreatePartition"): {"ops"},
        ("WriterFunctionRole", "glue:CreatePartition"): {"ops"},
        ("AnalyzerFunctionRole", "glue:CreateTable"): {"failures"},
        ("AnalyzerFunctionRole", "glue:UpdateTable"): {"failures"},
        ("ConsolidatorFunctionRole", "glue:UpdatePartition"): {"ops"},
        ("ConsolidatorFunctionRole", "s3:DeleteObject"): {
            "${LakeBucket.Arn}/ops/*",
            "${LakeBucket.Arn}/ops-compacted/*",
            "${LakeBucket.Arn}/state/compaction/*",
        },
    }


def test_every_reader_of_ops_also_reads_compacted_ops(transformed: dict[str, Any]) -> None:
    """Compaction moves a closed hour's partition to ops-compacted/: a role that reads ops/ but not
    ops-compacted/ would fail on every compacted hour."""
    ops, compacted = _lake("ops/*", "ops-compacted/*")
    roles = {role for role, _ in _statements(transformed)}
    readers = []
    for role in sorted(roles):
        by_action, allowed = _grants(transformed, role)
        if ops not in by_action.get("s3:GetObject", []):
            continue
        readers.append(role)
        assert compacted in by_action["s3:GetObject"], role
        assert "ops-compacted/*" in _listing_prefixes(allowed), role
    assert {
        "StatsFunctionRole",
        "ProfileFunctionRole",
        "SqlFunctionRole",
        "WorkerFunctionRole",
        "MatchFunctionRole",
        "AnalyzerFunctionRole",
        "ConsolidatorFunctionRole",
    } <= set(readers)


def test_jobs_write_the_objects_their_settings_name() -> None:
    """The exact state objects granted above are the ones the code uses by default."""
    from opslake.config import Settings

    settings = Settings()
    analyzer_puts = ANALYZER_GRANTS["s3:PutObject"]
    consolidator_puts = CONSOLIDATOR_GRANTS["s3:PutObject"]
    for key in (settings.analyzer_state_key, settings.llm_state_key):
        assert _lake(key)[0] in analyzer_puts, key
    for key in (settings.consolidator_state_key, settings.llm_state_key):
        assert _lake(key)[0] in consolidator_puts, key
    assert settings.playbooks_key.startswith("playbooks/")
    assert _lake("playbooks/*")[0] in consolidator_puts
