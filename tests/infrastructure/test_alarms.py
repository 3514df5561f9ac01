"""The alarms and the dashboard of template.yaml read only metrics that exist: every metric in the
opslake namespace is one the code emits (found by reading every ``add_metric`` call), under the
namespace and dimensions the code's Metrics object emits them with; every AWS metric is one AWS
publishes, with the dimension it is published by. And the alarms cover what must never go unseen:
each dead-letter queue, the ops queue's lag, each function's errors and throttles, the lost
records, each scheduled job's silence, the model's fallbacks.

An EMF metric is stored under its exact dimension set: an alarm on ``RecordsFailed`` without
``service=opslake`` watches a metric nobody writes and never fires. That is why dimensions are
compared too, and why a test below shows the check catches a typo.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import importlib
import itertools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.infrastructure

ROOT = Path(__file__).resolve().parents[2]
#: The service dimension's value as the alarms write it: the stack's name, which template.yaml
#: gives every function as POWERTOOLS_SERVICE_NAME (two stacks in one account keep apart metrics).
SERVICE_IN_TEMPLATE = {"Ref": "AWS::StackName"}
#: Where the service's code lives (the local stack and the SDK emit no CloudWatch metrics).
CODE_DIRS = ("layers/common/opslake", "functions")

#: What AWS publishes and the alarms or the dashboard read: namespace -> metric names, and the
#: dimensions they may be read by (AWS's contract, documented per service; not our code's).
AWS_METRICS = {
    "AWS/Lambda": {"Errors", "Throttles"},
    "AWS/SQS": {"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage"},
    "AWS/ApiGateway": {"4XXError", "5XXError"},
}
AWS_DIMENSIONS = {
    "AWS/Lambda": {"FunctionName"},
    "AWS/SQS": {"QueueName"},
    "AWS/ApiGateway": {"ApiName", "Method", "Resource", "Stage"},
}
#: Metric calls that would give a metric another dimension set than the Metrics object's default.
DIMENSION_CALLS = {"add_dimension", "single_metric", "EphemeralMetrics", "set_default_dimensions"}

Template = dict[str, Any]
ACTIONS = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}


# ---- what the code emits ----------------------------------------------------------------------
@cache
def _trees() -> dict[Path, ast.Module]:
    return {
        path: ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for folder in CODE_DIRS
        for path in sorted((ROOT / folder).rglob("*.py"))
    }


@cache
def scheduled_jobs() -> dict[str, tuple[str, str]]:
    """Each ScheduledJob subclass's ``name`` -> (module, class), read from the code."""
    jobs: dict[str, tuple[str, str]] = {}
    for path, tree in _trees().items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef) or not any(
                "ScheduledJob" in ast.unparse(base) for base in node.bases
            ):
                continue
            for stmt in node.body:
                target = stmt.target if isinstance(stmt, ast.AnnAssign) else None
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                    target = stmt.targets[0]
                value = getattr(stmt, "value", None)
                if isinstance(target, ast.Name) and target.id == "name" and isinstance(value, ast.Constant):
                    module = ".".join(path.relative_to(ROOT / "layers/common").with_suffix("").parts)
                    jobs[str(value.value)] = (module, node.name)
    return jobs


def metric_names(node: ast.expr, where: str) -> list[str]:
    """Every name a metric-name expression can take: a literal, either branch of ``a if c else b``,
    or an f-string over a job's ``self.name.capitalize()`` (one name per scheduled job). Anything
    else fails: a name the scan cannot read is a name no test can hold an alarm to."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return metric_names(node.body, where) + metric_names(node.orelse, where)
    if isinstance(node, ast.JoinedStr):
        choices: list[list[str]] = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                choices.append([str(part.value)])
            elif ast.unparse(part.value) == "self.name.capitalize()":
                choices.append([job.capitalize() for job in scheduled_jobs()])
            else:
                raise AssertionError(f"{where}: metric name {ast.unparse(node)} cannot be read")
        return ["".join(parts) for parts in itertools.product(*choices)]
    raise AssertionError(f"{where}: metric name {ast.unparse(node)} cannot be read")


def scan(trees: dict[Path, ast.Module]) -> tuple[set[str], list[str]]:
    """(metric names passed to ``add_metric``, places that add dimensions) in ``trees``."""
    names: set[str] = set()
    dimension_calls: list[str] = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            where = f"{path.relative_to(ROOT) if path.is_absolute() else path}:{node.lineno}"
            if called in DIMENSION_CALLS:
                dimension_calls.append(f"{where} {called}")
            if called != "add_metric":
                continue
            named = [k.value for k in node.keywords if k.arg == "name"] or node.args[:1]
            assert named, f"{where}: add_metric without a name"
            names.update(metric_names(named[0], where))
    return names, dimension_calls


@dataclass(frozen=True)
class Emitted:
    names: frozenset[str]
    namespace: str
    dimensions: dict[str, str]


@pytest.fixture(scope="module")
def emitted() -> Emitted:
    """The metric names the code emits, with the namespace and dimensions of the EMF blob the
    service's own Metrics object writes (what CloudWatch stores them under)."""
    from opslake.observability import metrics

    names, _ = scan(_trees())
    metrics.add_metric(name="Probe", unit="Count", value=1)
    try:
        blob = metrics.serialize_metric_set()
    finally:
        metrics.clear_metrics()
    (directive,) = blob["_aws"]["CloudWatchMetrics"]
    (dimension_set,) = directive["Dimensions"]
    dimensions = {d: blob[d] for d in dimension_set}
    # The service dimension is POWERTOOLS_SERVICE_NAME, which this test process sets and a stack's
    # functions take from template.yaml (the stack's name: test_the_service_dimension_is_the_stacks)
    assert dimensions == {"service": os.environ["POWERTOOLS_SERVICE_NAME"]}
    return Emitted(frozenset(names), directive["Namespace"], {"service": SERVICE_IN_TEMPLATE})


# ---- what the template reads ------------------------------------------------------------------
def alarms(template: Template) -> dict[str, dict[str, Any]]:
    return {
        logical_id: resource["Properties"]
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::CloudWatch::Alarm"
    }


def alarm_metrics(props: dict[str, Any]) -> list[dict[str, Any]]:
    """The metrics an alarm reads: its own, or each MetricStat of its metric math."""
    if "MetricName" in props:
        return [{k: props.get(k, []) for k in ("Namespace", "MetricName", "Dimensions")}]
    return [query["MetricStat"]["Metric"] for query in props.get("Metrics", []) if "MetricStat" in query]


def metric_problem(namespace: str, name: str, dimensions: dict[str, Any], emitted: Emitted) -> str | None:
    """Why (namespace, name, dimensions) is no metric that exists, or None."""
    if namespace == emitted.namespace:
        if name not in emitted.names:
            return f"{namespace}/{name}: the code emits no such metric"
        if dimensions != emitted.dimensions:
            return f"{namespace}/{name}: dimensions {dimensions}, the code emits {emitted.dimensions}"
        return None
    if namespace not in AWS_METRICS:
        return f"{namespace}/{name}: neither the code's namespace ({emitted.namespace}) nor AWS's"
    if name not in AWS_METRICS[namespace]:
        return f"{namespace}/{name}: not a metric this template reads from {namespace}"
    if not dimensions or not set(dimensions) <= AWS_DIMENSIONS[namespace]:
        return f"{namespace}/{name}: dimensions {sorted(dimensions)} are not how AWS publishes it"
    return None


def alarm_problems(template: Template, emitted: Emitted) -> list[str]:
    problems = []
    for logical_id, props in alarms(template).items():
        read = alarm_metrics(props)
        if not read:
            problems.append(f"{logical_id}: reads no metric")
        for metric in read:
            dims = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
            problem = metric_problem(metric["Namespace"], metric["MetricName"], dims, emitted)
            if problem:
                problems.append(f"{logical_id}: {problem}")
    return problems


def find_alarms(template: Template, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    return {
        logical_id: props
        for logical_id, props in alarms(template).items()
        if any(m["Namespace"] == namespace and m["MetricName"] == name for m in alarm_metrics(props))
    }


# ---- alarms -----------------------------------------------------------------------------------
def test_every_alarm_reads_a_metric_that_is_emitted(sam_template: Template, emitted: Emitted) -> None:
    assert len(alarms(sam_template)) >= 10
    assert alarm_problems(sam_template, emitted) == []


def test_a_misnamed_or_undimensioned_alarm_metric_is_caught(sam_template: Template, emitted: Emitted) -> None:
    broken = copy.deepcopy(sam_template)
    ours = [p for p in alarms(broken).values() if p.get("Namespace") == emitted.namespace]
    ours[0]["MetricName"] += "s"  # a typo
    ours[1]["Dimensions"] = []  # the service dimension forgotten
    ours[2]["Namespace"] = "OpsLake"
    problems = "\n".join(alarm_problems(broken, emitted))
    assert "the code emits no such metric" in problems
    assert "dimensions {}, the code emits" in problems
    assert "OpsLake" in problems


def test_the_scan_reads_every_metric_name_or_fails(emitted: Emitted) -> None:
    # f-strings over the job's name expand to each scheduled job's metric
    for job in scheduled_jobs():
        assert {f"{job.capitalize()}Succeeded", f"{job.capitalize()}LeaseLost"} <= emitted.names
    assert {"StatsQueries", "StatsCacheHits"} <= emitted.names  # both branches of a conditional name
    unreadable = ast.parse("metrics.add_metric(name=computed, unit='Count', value=1)")
    with pytest.raises(AssertionError, match="cannot be read"):
        scan({Path("probe.py"): unreadable})


def test_every_metric_carries_only_the_default_dimensions(emitted: Emitted) -> None:
    """The alarms name exactly the Metrics object's dimensions: code that adds one would store its
    metrics under another dimension set, which no alarm here would match."""
    assert (
        emitted.dimensions == {"service": emitted.dimensions.get("service")} and emitted.dimensions["service"]
    )
    assert scan(_trees())[1] == []


def _dead_letter_queues(resources: dict[str, Any]) -> set[str]:
    targets = set()
    for resource in resources.values():
        props = resource.get("Properties", {})
        target = props.get("RedrivePolicy", {}).get("deadLetterTargetArn")
        target = target or props.get("DeadLetterQueue", {}).get("TargetArn")
        if isinstance(target, dict) and "Fn::GetAtt" in target:
            targets.add(target["Fn::GetAtt"][0])
    return targets


def test_every_dead_letter_queue_alarms_on_any_message(
    sam_template: Template, resources: dict[str, Any]
) -> None:
    queues = _dead_letter_queues(resources)
    assert queues, "no dead-letter queue found: the scan is broken"
    watched = find_alarms(sam_template, "AWS/SQS", "ApproximateNumberOfMessagesVisible")
    for queue in queues:
        matching = [
            p
            for p in watched.values()
            if p["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}]
        ]
        assert matching, f"no alarm on {queue} holding a message"
        assert all(
            (p["Threshold"], p["ComparisonOperator"], p["Statistic"])
            == (0, "GreaterThanThreshold", "Maximum")
            for p in matching
        )


def test_the_ops_queue_lag_alarm_sits_above_a_healthy_writers_delay(
    sam_template: Template, resources: dict[str, Any], functions: dict[str, dict[str, Any]]
) -> None:
    params = sam_template["Parameters"]
    sources = [lid for lid, r in resources.items() if "RedrivePolicy" in r.get("Properties", {})]
    assert sources
    watched = find_alarms(sam_template, "AWS/SQS", "ApproximateAgeOfOldestMessage")
    for queue in sources:
        (alarm,) = [
            p for p in watched.values() if p["Dimensions"][0]["Value"] == {"Fn::GetAtt": [queue, "QueueName"]}
        ]
        threshold = params[alarm["Threshold"]["Ref"]]
        # the writer of this queue: its batching window plus its timeout is a healthy record's wait
        for fn in functions.values():
            for event in fn.get("Events", {}).values():
                if event["Type"] == "SQS" and event["Properties"]["Queue"] == {"Fn::GetAtt": [queue, "Arn"]}:
                    healthy = event["Properties"].get("MaximumBatchingWindowInSeconds", 0) + fn["Timeout"]
                    assert threshold["MinValue"] > healthy and threshold["Default"] > healthy
        assert threshold["Default"] < resources[queue]["Properties"]["MessageRetentionPeriod"]
        assert alarm["ComparisonOperator"] == "GreaterThanThreshold" and alarm["Statistic"] == "Maximum"


def test_every_function_has_errors_and_throttles_alarms(
    sam_template: Template, functions: dict[str, dict[str, Any]]
) -> None:
    assert functions
    for metric in ("Errors", "Throttles"):
        watched = find_alarms(sam_template, "AWS/Lambda", metric)
        named = {}
        for props in watched.values():
            (dimension,) = props["Dimensions"]
            assert dimension["Name"] == "FunctionName"
            named[dimension["Value"]["Ref"]] = props
            assert (props["Threshold"], props["ComparisonOperator"], props["Statistic"]) == (
                0,
                "GreaterThanThreshold",
                "Sum",
            )
        assert set(named) == set(functions), f"{metric}: functions without an alarm"


@pytest.mark.parametrize(
    "metric", ["RecordsFailed", "ObservationsLost", "LlmOpsLost", "LlmStateNotSaved", "CompactionFailed"]
)
def test_each_lost_or_failed_record_alarms(sam_template: Template, emitted: Emitted, metric: str) -> None:
    assert metric in emitted.names  # the issue names these; the code must still emit them
    (props,) = find_alarms(sam_template, emitted.namespace, metric).values()
    assert (props["Threshold"], props["ComparisonOperator"], props["Statistic"]) == (
        0,
        "GreaterThanThreshold",
        "Sum",
    )


def _rate_seconds(expression: str) -> int:
    match = re.fullmatch(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)", expression)
    assert match, f"{expression}: only rate() schedules have a period to alarm on"
    unit = {"minute": 60, "hour": 3600, "day": 86400}[match.group(2).rstrip("s")]
    return int(match.group(1)) * unit


def _job_of(function: dict[str, Any]) -> str:
    module, _ = function["Handler"].rsplit(".", 1)
    tree = ast.parse((ROOT / function["CodeUri"] / f"{module}.py").read_text(encoding="utf-8"))
    jobs = [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func).endswith("job_handler")
        and isinstance(node.args[0], ast.Constant)
    ]
    assert len(jobs) == 1, f"{function['Handler']}: not one runtime.job_handler(<job>) call"
    return str(jobs[0])


def test_each_scheduled_job_alarms_when_it_has_not_succeeded_in_two_periods(
    sam_template: Template, functions: dict[str, dict[str, Any]], emitted: Emitted
) -> None:
    scheduled = {
        lid: [e["Properties"]["Schedule"] for e in fn.get("Events", {}).values() if e["Type"] == "Schedule"]
        for lid, fn in functions.items()
    }
    scheduled = {lid: schedules for lid, schedules in scheduled.items() if schedules}
    assert scheduled
    for lid, (schedule,) in scheduled.items():
        job = _job_of(functions[lid])
        assert job in scheduled_jobs(), f"{lid}: {job} is no ScheduledJob"
        metric = f"{job.capitalize()}Succeeded"
        assert metric in emitted.names
        (props,) = find_alarms(sam_template, emitted.namespace, metric).values()
        assert props["Period"] == _rate_seconds(schedule), f"{lid}: the period is the schedule's rate"
        assert props["EvaluationPeriods"] == props["DatapointsToAlarm"] == 2
        assert (props["Statistic"], props["Threshold"], props["ComparisonOperator"]) == (
            "Sum",
            1,
            "LessThanThreshold",
        )
        assert props["TreatMissingData"] == "breaching"  # a job that stopped emits nothing at all


def test_model_fallbacks_alarm_on_their_share_of_diagnoses(sam_template: Template, emitted: Emitted) -> None:
    (props,) = find_alarms(sam_template, emitted.namespace, "DiagnosisFallbacks").values()
    ids = {q["MetricStat"]["Metric"]["MetricName"]: q["Id"] for q in props["Metrics"] if "MetricStat" in q}
    assert set(ids) == {"DiagnosisFallbacks", "Diagnoses"}
    (returned,) = [q for q in props["Metrics"] if q.get("ReturnData", True)]
    assert f"{ids['DiagnosisFallbacks']} / {ids['Diagnoses']}" in returned["Expression"]
    threshold = sam_template["Parameters"][props["Threshold"]["Ref"]]
    assert 0 < threshold["Default"] < 1 and threshold["MaxValue"] == 1


def test_alarm_names_carry_the_stack_prefix_opslake_doctor_lists_them_by(sam_template: Template) -> None:
    names = []
    for logical_id, props in alarms(sam_template).items():
        sub = props["AlarmName"]["Fn::Sub"]
        assert isinstance(sub, str) and sub.startswith("${AWS::StackName}-"), logical_id
        names.append(sub)
    assert len(names) == len(set(names))


def test_every_alarm_notifies_the_optional_topic(sam_template: Template) -> None:
    assert sam_template["Parameters"]["AlarmTopicArn"]["Default"] == ""
    assert sam_template["Conditions"]["HasAlarmTopic"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]}]
    }
    for logical_id, props in alarms(sam_template).items():
        assert props["AlarmActions"] == ACTIONS and props["OKActions"] == ACTIONS, logical_id


def test_the_topic_parameter_accepts_an_sns_arn_or_nothing(sam_template: Template) -> None:
    pattern = sam_template["Parameters"]["AlarmTopicArn"]["AllowedPattern"]
    assert re.fullmatch(pattern, "")
    assert re.fullmatch(pattern, "arn:aws:sns:eu-west-1:123456789012:opslake-alarms")
    assert not re.fullmatch(pattern, "arn:aws:sqs:eu-west-1:123456789012:opslake-alarms")
    assert not re.fullmatch(pattern, "opslake-alarms")


# ---- the dashboard ----------------------------------------------------------------------------
def _dashboard(template: Template) -> str:
    (props,) = [
        r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Dashboard"
    ]
    assert props["DashboardName"] == {"Fn::Sub": "${AWS::StackName}"}
    body: str = props["DashboardBody"]["Fn::Sub"]
    return body


def substituted(body: str, template: Template) -> Any:
    """The body as CloudFormation would send it: each ${X} must name a parameter, a resource (or
    its attribute) or a pseudo parameter; numbers take the parameter's default, the rest a word."""
    params = template["Parameters"]

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("AWS::"):
            return f"<{name}>"  # read back as {"Ref": name} by dashboard_problems
        if name in params:
            return str(params[name]["Default"]) if params[name]["Type"] == "Number" else "param"
        assert name.split(".")[0] in template["Resources"], f"${{{name}}} names nothing"
        return "resource"

    assert "${!" not in body
    return json.loads(re.sub(r"\$\{([^}]+)\}", value, body))


def _as_template(dimensions: dict[str, Any]) -> dict[str, Any]:
    """A substituted pseudo parameter ("<AWS::StackName>") as the alarms write it ({"Ref": …})."""
    return {
        key: {"Ref": value[1:-1]} if isinstance(value, str) and re.fullmatch(r"<AWS::\w+>", value) else value
        for key, value in dimensions.items()
    }


def dashboard_problems(body: Any, emitted: Emitted) -> list[str]:
    problems = []
    for widget in body["widgets"]:
        props = widget["properties"]
        if widget["type"] != "metric":
            continue
        previous: list[Any] = []
        for row in props["metrics"]:
            if isinstance(row, dict):  # a SEARCH expression: its namespace and metric name
                found = re.search(r"\{([^,}]+)[^}]*\}.*MetricName=\"([^\"]+)\"", row["expression"])
                if not found:
                    problems.append(f"{props['title']}: an expression naming no metric")
                    continue
                namespace, name = found.groups()
                dims = dict(re.findall(r"(\w+)=\"([^\"]*)\"", row["expression"]))
                dims.pop("MetricName")
                problem = metric_problem(namespace, name, _as_template(dims), emitted)
            else:
                parts = [p for p in row if not isinstance(p, dict)]
                parts = [previous[i] if p == "." else p for i, p in enumerate(parts)]  # "." repeats
                previous = parts
                namespace, name, rest = parts[0], parts[1], parts[2:]
                problem = metric_problem(
                    namespace, name, _as_template(dict(zip(rest[::2], rest[1::2], strict=True))), emitted
                )
            if problem:
                problems.append(f"{props['title']}: {problem}")
    return problems


def test_the_dashboard_body_is_json_and_names_only_emitted_metrics(
    sam_template: Template, emitted: Emitted
) -> None:
    body = substituted(_dashboard(sam_template), sam_template)
    assert {w["type"] for w in body["widgets"]} <= {"metric", "log"}
    assert dashboard_problems(body, emitted) == []
    named = json.dumps(body)
    for metric in (
        "OpsAccepted",
        "SpansReceived",
        "ApproximateAgeOfOldestMessage",
        "5XXError",
        "PlaybookEntriesServed",
    ):
        assert f'"{metric}' in named or f'\\"{metric}\\"' in named, f"the dashboard lacks {metric}"


def test_a_dashboard_metric_typo_is_caught(sam_template: Template, emitted: Emitted) -> None:
    body = _dashboard(sam_template).replace('"PlaybookEntriesServed"', '"PlaybookEntryServed"')
    body = body.replace('MetricName=\\"5XXError\\"', 'MetricName=\\"5xxError\\"')
    problems = "\n".join(dashboard_problems(substituted(body, sam_template), emitted))
    assert "PlaybookEntryServed: the code emits no such metric" in problems
    assert "5xxError: not a metric" in problems


def test_the_dashboards_log_queries_read_fields_the_jobs_log(
    sam_template: Template, resources: dict[str, Any], functions: dict[str, dict[str, Any]]
) -> None:
    """A log widget reads the scheduled jobs' run lines (``logger.info("<job> run", **report)``):
    each field it reads is a field of the report of every job whose log group it reads."""
    body = substituted(_dashboard(sam_template), sam_template)
    raw = _dashboard(sam_template)
    queries = re.findall(r'"query": "([^"]+)"', raw)
    assert queries and len(queries) == sum(w["type"] == "log" for w in body["widgets"])
    for query in queries:
        groups = re.findall(r"SOURCE '\$\{(\w+)\}'", query)
        fields = set(re.findall(r"(?:sum|avg|max|min|ispresent)\((\w+)\)", query))
        assert groups and fields
        for group in groups:
            log_name = resources[group]["Properties"]["LogGroupName"]["Fn::Sub"]
            function = re.fullmatch(r"/aws/lambda/\$\{(\w+)\}", log_name).group(1)  # type: ignore[union-attr]
            module, cls = scheduled_jobs()[_job_of(functions[function])]
            report = getattr(importlib.import_module(module), cls).report_type
            assert fields <= {f.name for f in dataclasses.fields(report)}, (group, fields)


def test_the_operations_page_explains_every_alarm(sam_template: Template, functions: dict[str, Any]) -> None:
    """docs/operations/alarms.md has a row per alarm (one pattern row for the per-function ones)."""
    page = (ROOT / "docs/operations/alarms.md").read_text(encoding="utf-8")
    for logical_id, props in alarms(sam_template).items():
        suffix = props["AlarmName"]["Fn::Sub"].removeprefix("${AWS::StackName}-")
        function, _, kind = suffix.partition("-")
        row = f"`<Function>-{kind}`" if function in functions else f"`{suffix}`"
        assert f"| {row}" in page, f"{logical_id}: docs/operations/alarms.md has no row for {row}"


def test_the_service_dimension_is_the_stacks(functions: dict[str, dict[str, Any]]) -> None:
    """Every function runs with POWERTOOLS_SERVICE_NAME = the stack's name, and the code's metrics
    carry exactly that as their service dimension (so a second stack's metrics are not this one's)."""
    for name, function in functions.items():
        assert function["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"] == SERVICE_IN_TEMPLATE, name
    probe = (
        "from opslake.observability import metrics\n"
        "metrics.add_metric(name='Probe', unit='Count', value=1)\n"
        "print(metrics.serialize_metric_set()['service'])"
    )
    env = {**os.environ, "POWERTOOLS_SERVICE_NAME": "opslake-staging"}
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "opslake-staging"
