"""Every route and event source leads to a handler that exists (checked with ast, never imported)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.infrastructure


def handler_problem(code_dir: Path, handler: str) -> str | None:
    """Why ``handler`` ("module.func" or "pkg.module.func") is not in ``code_dir``, or None if it is.

    The function must be bound at module top level: a ``def``, an assignment or an import.
    """
    module, _, func = handler.rpartition(".")
    if not module or not func:
        return f"handler {handler!r} is not of the form module.function"
    base = code_dir.joinpath(*module.split("."))
    source = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
    if source is None:
        return f"{base.with_suffix('.py')} does not exist"
    tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            bound.add(node.name)
        elif isinstance(node, ast.Assign):
            bound.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            bound.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    if func not in bound:
        return f"{source} defines no top-level {func!r}"
    return None


def test_every_event_of_every_function_points_at_an_existing_handler(
    functions: dict[str, dict[str, Any]], project_root: Path
) -> None:
    problems = []
    events_seen = 0
    for name, props in functions.items():
        code_uri, handler = props.get("CodeUri"), props.get("Handler")
        if not isinstance(code_uri, str) or not isinstance(handler, str):
            problems.append(f"{name}: CodeUri and Handler must be literal strings")
            continue
        for event_name, event in props.get("Events", {}).items():
            events_seen += 1
            problem = handler_problem(project_root / code_uri, handler)
            if problem:
                where = event["Properties"].get("Path", event["Type"])
                problems.append(f"{name}.{event_name} ({where}): {problem}")
    assert events_seen >= 3, "expected the /events, /health and SQS event sources"
    assert not problems, "\n".join(problems)


def test_every_route_is_on_the_keyed_api(functions: dict[str, dict[str, Any]]) -> None:
    """A route without RestApiId lands on SAM's implicit API, which has no API keys or usage plan."""
    routes = {
        (e["Properties"]["Method"].upper(), e["Properties"]["Path"]): e["Properties"].get("RestApiId")
        for props in functions.values()
        for e in props.get("Events", {}).values()
        if e["Type"] == "Api"
    }
    assert {("POST", "/events"), ("POST", "/v1/traces"), ("GET", "/health")} <= set(routes)
    assert {r: api for r, api in routes.items() if api != {"Ref": "OpsApi"}} == {}


# The checker itself, on scratch trees: it must reject what Lambda would fail to load.


@pytest.mark.parametrize(
    ("files", "handler", "ok"),
    [
        ({"events.py": "def handler(event, context):\n    return 1\n"}, "events.handler", True),
        ({"events.py": "from x import handler\n"}, "events.handler", True),
        ({"events.py": "handler = object()\n"}, "events.handler", True),
        ({"pkg/__init__.py": "", "pkg/mod.py": "def run(e, c): ...\n"}, "pkg.mod.run", True),
        ({"events.py": "def other(event, context): ...\n"}, "events.handler", False),
        ({"events.py": "class X:\n    def handler(self): ...\n"}, "events.handler", False),
        ({"events.py": "def f():\n    def handler(): ...\n"}, "events.handler", False),
        ({}, "events.handler", False),
        ({"events.py": "def handler(e, c): ...\n"}, "handler", False),
    ],
)
def test_handler_checker(tmp_path: Path, files: dict[str, str], handler: str, ok: bool) -> None:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert (handler_problem(tmp_path, handler) is None) is ok


# ---- scheduled jobs: what runs when, and that a slow run is never overlapped -------------------
SCHEDULED_JOBS = {
    # function: (handler, schedule, Settings field of its lease)
    "AnalyzerFunction": ("analyzer.handler", "rate(5 minutes)", "analyzer_lease_s"),
    "ConsolidatorFunction": ("consolidator.handler", "rate(30 minutes)", "consolidator_lease_s"),
}


def _deployed_environment(sam_template: dict[str, Any], props: dict[str, Any]) -> dict[str, str]:
    """The function's literal environment, Refs to parameters replaced by their defaults (what a
    deploy with default parameters gives it); any other intrinsic becomes a placeholder string."""
    parameters = sam_template.get("Parameters", {})
    env = {}
    for name, value in props.get("Environment", {}).get("Variables", {}).items():
        if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in parameters:
            value = parameters[value["Ref"]].get("Default", "")
        env[name] = str(value) if not isinstance(value, dict) else "placeholder"
    return env


def test_only_the_two_jobs_are_scheduled(functions: dict[str, dict[str, Any]]) -> None:
    scheduled = {
        name
        for name, props in functions.items()
        for e in props.get("Events", {}).values()
        if e["Type"] in ("Schedule", "ScheduleV2")
    }
    assert scheduled == set(SCHEDULED_JOBS)


@pytest.mark.parametrize("function", sorted(SCHEDULED_JOBS))
def test_job_has_exactly_one_schedule_and_an_existing_handler(
    functions: dict[str, dict[str, Any]], project_root: Path, function: str
) -> None:
    handler, schedule, _ = SCHEDULED_JOBS[function]
    props = functions[function]
    (event,) = props["Events"].values()
    assert event["Type"] == "Schedule"
    assert event["Properties"]["Schedule"] == schedule
    assert event["Properties"].get("Enabled", True) is True
    assert "Input" not in event["Properties"], "the handler must get EventBridge's Scheduled Event"
    assert props["CodeUri"] == "functions/analyzer/"
    assert props["Handler"] == handler
    assert handler_problem(project_root / props["CodeUri"], handler) is None


@pytest.mark.parametrize("function", sorted(SCHEDULED_JOBS))
def test_job_schedule_reaches_the_function(transformed: dict[str, Any], function: str) -> None:
    """SAM turns the Schedule event into one EventBridge rule targeting the function."""
    _, schedule, _ = SCHEDULED_JOBS[function]
    rules = [
        r["Properties"]
        for r in transformed["Resources"].values()
        if r["Type"] == "AWS::Events::Rule"
        and any(t["Arn"] == {"Fn::GetAtt": [function, "Arn"]} for t in r["Properties"]["Targets"])
    ]
    assert len(rules) == 1, rules
    assert rules[0]["ScheduleExpression"] == schedule
    assert rules[0].get("State", "ENABLED") == "ENABLED"
    permissions = [
        r["Properties"]
        for r in transformed["Resources"].values()
        if r["Type"] == "AWS::Lambda::Permission" and r["Properties"]["FunctionName"] == {"Ref": function}
    ]
    assert [p["Principal"] for p in permissions] == ["events.amazonaws.com"]


@pytest.mark.parametrize("function", sorted(SCHEDULED_JOBS))
def test_job_lease_outlasts_two_lambda_timeouts(
    sam_template: dict[str, Any], functions: dict[str, dict[str, Any]], function: str
) -> None:
    """The S3 lease must outlive a run that hits its Lambda timeout (with margin: 2x), or the next
    scheduled run would take the lease and overlap it."""
    from opslake.config import load_settings

    _, _, lease_field = SCHEDULED_JOBS[function]
    props = functions[function]
    settings = load_settings(_deployed_environment(sam_template, props))
    timeout = props["Timeout"]
    assert isinstance(timeout, int)
    assert getattr(settings, lease_field) >= 2 * timeout, (
        lease_field,
        getattr(settings, lease_field),
        timeout,
    )
