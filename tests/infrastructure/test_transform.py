"""The SAM translator turns template.yaml into the resources the code and the design rely on."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.infrastructure


def _of_type(template: dict[str, Any], type_: str) -> dict[str, Any]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_}


def test_usage_plan_has_the_logical_id_the_outputs_reference(transformed: dict[str, Any]) -> None:
    plans = _of_type(transformed, "AWS::ApiGateway::UsagePlan")
    assert list(plans) == ["OpsApiUsagePlan"]
    assert transformed["Outputs"]["ApiUsagePlanId"]["Value"] == {"Ref": "OpsApiUsagePlan"}
    props = plans["OpsApiUsagePlan"]["Properties"]
    assert props["Quota"]["Period"] == "DAY"
    assert set(props["Throttle"]) == {"RateLimit", "BurstLimit"}
    assert props["ApiStages"] == [{"ApiId": {"Ref": "OpsApi"}, "Stage": {"Ref": "OpsApiStage"}}]


def test_writer_reads_the_ops_queue_in_large_batches_with_partial_failures(
    transformed: dict[str, Any],
) -> None:
    mappings = _of_type(transformed, "AWS::Lambda::EventSourceMapping")
    assert len(mappings) == 1, mappings
    (props,) = (m["Properties"] for m in mappings.values())
    assert props["FunctionName"] == {"Ref": "WriterFunction"}
    assert props["EventSourceArn"] == {"Fn::GetAtt": ["OpsQueue", "Arn"]}
    assert props["BatchSize"] == 10000
    assert props["MaximumBatchingWindowInSeconds"] == 60
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_functions_run_python312_with_tracing_and_shared_environment(transformed: dict[str, Any]) -> None:
    fns = _of_type(transformed, "AWS::Lambda::Function")
    assert set(fns) == {
        "EventsFunction",
        "TracesFunction",
        "HealthFunction",
        "WriterFunction",
        "StatsFunction",
        "ProfileFunction",
        "SqlFunction",
        "LogFunction",
        "PlaybooksFunction",
        "ModelFunction",
        "TablesFunction",
        "WorkerFunction",
        "MatchFunction",
        "SearchFunction",
        "AskFunction",
        "McpFunction",
        "AnalyzerFunction",
        "ConsolidatorFunction",
    }
    for name, fn in fns.items():
        props = fn["Properties"]
        assert props["Runtime"] == "python3.12", name
        assert props["Architectures"] == ["x86_64"], name
        assert props["TracingConfig"] == {"Mode": "Active"}, name
        env = props["Environment"]["Variables"]
        assert env["OPSLAKE_OPS_QUEUE_URL"] == {"Ref": "OpsQueue"}, name
        assert env["OPSLAKE_LAKE_BUCKET"] == {"Ref": "LakeBucket"}, name
        assert env["OPSLAKE_GLUE_DATABASE"] == {"Ref": "GlueDatabase"}, name
        assert env["OPSLAKE_OPS_TABLE"] == "ops", name
        assert env["POWERTOOLS_SERVICE_NAME"] == {"Ref": "AWS::StackName"}, name  # the metrics' service


def test_pyarrow_layer_only_on_the_writer_and_the_scheduled_jobs(transformed: dict[str, Any]) -> None:
    layers = _of_type(transformed, "AWS::Lambda::LayerVersion")
    # SAM renames layers to <LogicalId><hash>; map the generated ids back.
    common = [k for k in layers if k.startswith("CommonLayer")]
    data = [k for k in layers if k.startswith("DataLayer")]
    assert len(common) == 1 and len(data) == 1, list(layers)
    fns = _of_type(transformed, "AWS::Lambda::Function")
    refs = {name: [layer["Ref"] for layer in fn["Properties"]["Layers"]] for name, fn in fns.items()}
    assert refs["WriterFunction"] == [common[0], data[0]]  # each once: no duplicate from Globals
    assert refs["EventsFunction"] == [common[0]]
    assert refs["TracesFunction"] == [common[0]]
    assert refs["HealthFunction"] == [common[0]]
    assert refs["AnalyzerFunction"] == [common[0], data[0]]
    assert refs["ConsolidatorFunction"] == [common[0], data[0]]
    assert {name for name, r in refs.items() if data[0] in r} == {
        "WriterFunction",
        "AnalyzerFunction",
        "ConsolidatorFunction",
    }


def test_globals_merge_of_the_fixture_matches_the_translator(
    transformed: dict[str, Any], functions: dict[str, Any]
) -> None:
    """The ``functions`` fixture merges Globals as SAM does: its environment is what gets deployed."""
    fns = _of_type(transformed, "AWS::Lambda::Function")
    for name, props in functions.items():
        deployed = fns[name]["Properties"]
        assert props["Environment"] == deployed["Environment"], name
        assert props["Timeout"] == deployed.get("Timeout", 3), name


def test_scheduled_jobs_get_their_parameters(transformed: dict[str, Any]) -> None:
    fns = _of_type(transformed, "AWS::Lambda::Function")
    analyzer = fns["AnalyzerFunction"]["Properties"]["Environment"]["Variables"]
    consolidator = fns["ConsolidatorFunction"]["Properties"]["Environment"]["Variables"]
    assert analyzer["OPSLAKE_ANALYZER_SETTLE_S"] == {"Ref": "AnalyzerSettleSeconds"}
    assert analyzer["OPSLAKE_DIAGNOSIS_BUDGET"] == {"Ref": "AnalyzerDiagnosisBudget"}
    assert consolidator["OPSLAKE_PLAYBOOK_APPROVAL_MODE"] == {"Ref": "PlaybookApprovalMode"}
    assert consolidator["OPSLAKE_PLAYBOOK_MIN_REPORTERS"] == {"Ref": "PlaybookMinReporters"}
    for env in (analyzer, consolidator):  # both count reporters under the same trust levels
        assert env["OPSLAKE_REPORTER_TRUST"] == {"Ref": "ReporterTrust"}
        assert env["OPSLAKE_REPORTER_TRUST_DEFAULT"] == {"Ref": "ReporterTrustDefault"}
    for env in (analyzer, consolidator):
        assert env["OPSLAKE_LLM_API_KEY_PARAMETER"] == {"Ref": "LlmApiKeyParameter"}
        assert env["OPSLAKE_ATHENA_WORKGROUP"] == {"Ref": "AthenaWorkGroup"}


def test_every_function_has_a_log_group_with_retention(
    sam_template: dict[str, Any], functions: dict[str, Any]
) -> None:
    groups = _of_type(sam_template, "AWS::Logs::LogGroup")
    names = {
        g["Properties"]["LogGroupName"].get("Fn::Sub"): g["Properties"].get("RetentionInDays")
        for g in groups.values()
        if isinstance(g["Properties"]["LogGroupName"], dict)
    }
    for fn in functions:
        assert names.get(f"/aws/lambda/${{{fn}}}") == {"Ref": "LogRetentionDays"}, fn


def test_every_opslake_variable_is_a_setting(functions: dict[str, Any]) -> None:
    """Settings ignores unknown keys, so a misspelt OPSLAKE_* variable would be dropped silently."""
    from opslake.config import ENV_PREFIX, Settings

    unknown = {
        f"{name}: {var}"
        for name, props in functions.items()
        for var in props["Environment"]["Variables"]
        if var.startswith(ENV_PREFIX) and var[len(ENV_PREFIX) :].lower() not in Settings.model_fields
    }
    assert not unknown, sorted(unknown)


def test_trust_level_parameter_offers_exactly_the_settings_levels(sam_template: dict[str, Any]) -> None:
    from typing import get_args

    from opslake.config import TrustLevel

    parameters = sam_template["Parameters"]
    assert parameters["ReporterTrustDefault"]["AllowedValues"] == list(get_args(TrustLevel))
    assert parameters["ReporterTrustDefault"]["Default"] == "reporter"
    assert parameters["ReporterTrust"]["Default"] == ""  # no key named: every key is one reporter


def _setting_bounds(name: str) -> tuple[float | None, float | None]:
    """(lowest, highest) value a numeric setting accepts (pydantic ge/gt and le/lt; None: unbounded)."""
    import annotated_types as at

    from opslake.config import Settings

    low = high = None
    for bound in Settings.model_fields[name].metadata:
        if isinstance(bound, at.Ge | at.Gt):
            low = float(bound.ge if isinstance(bound, at.Ge) else bound.gt)
        if isinstance(bound, at.Le | at.Lt):
            high = float(bound.le if isinstance(bound, at.Le) else bound.lt)
    return low, high


def test_numeric_parameters_are_bounded_as_their_settings_are(
    sam_template: dict[str, Any], functions: dict[str, Any]
) -> None:
    """A parameter value its setting refuses deploys fine, then stops every function that loads the
    settings (issue 12: PlaybookMinReporters above 200 stopped the consolidator at cold start)."""
    from opslake.config import ENV_PREFIX

    parameters = sam_template["Parameters"]
    checked, loose = set(), []
    for props in functions.values():
        for var, value in props["Environment"]["Variables"].items():
            if not (var.startswith(ENV_PREFIX) and isinstance(value, dict) and "Ref" in value):
                continue
            parameter = parameters.get(value["Ref"])
            if parameter is None or parameter["Type"] != "Number" or value["Ref"] in checked:
                continue
            checked.add(value["Ref"])
            low, high = _setting_bounds(var[len(ENV_PREFIX) :].lower())
            if low is not None and ("MinValue" not in parameter or float(parameter["MinValue"]) < low):
                loose.append(f"{value['Ref']}: MinValue {parameter.get('MinValue')} < {low}")
            if high is not None and ("MaxValue" not in parameter or float(parameter["MaxValue"]) > high):
                loose.append(f"{value['Ref']}: MaxValue {parameter.get('MaxValue')} > {high}")
    assert "PlaybookMinReporters" in checked
    assert not loose, loose


@pytest.mark.parametrize(
    "value",
    [
        "",
        "{}",
        '{"runtime-a": "runtime", "scraper": "untrusted"}',
        ' { "a \\"quoted\\" key" : "reporter" } ',
        '{"ops-team":"reporter"}',
        '{"a": "admin"}',
        '{"a": "reporter",}',
        '["a"]',
        '{"a": reporter}',
        "{",
        '{"a": "runtime"} trailing',
    ],
)
def test_reporter_trust_parameter_allows_what_the_setting_accepts(
    sam_template: dict[str, Any], value: str
) -> None:
    import re

    from opslake.config import Settings
    from opslake.errors import ConfigurationError

    pattern = sam_template["Parameters"]["ReporterTrust"]["AllowedPattern"]
    try:
        Settings.model_validate({"reporter_trust": value} if value else {})
        accepted = True
    except (ValueError, ConfigurationError):
        accepted = False
    assert (re.fullmatch(pattern, value) is not None) == accepted, value


def test_the_api_passes_protobuf_bodies_through_as_binary(transformed: dict[str, Any]) -> None:
    """OTLP/HTTP exporters POST application/x-protobuf to /v1/traces: without the binary media type
    API Gateway would hand the function the bytes as (mangled) text instead of base64."""
    api = transformed["Resources"]["OpsApi"]["Properties"]
    binary = {t.replace("~1", "/") for t in api["BinaryMediaTypes"]}
    assert binary & {"application/x-protobuf", "application/*", "*/*"}, binary
