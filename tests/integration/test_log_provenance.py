"""POST /log → queue → writer → the lake → the consolidator's evidence query → LogRow, on the local
stack: every part of a report comes back from its own column, whatever punctuation it contains."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from opslake.analysis.playbooks import LogRow, candidate_groups, heuristic_draft
from opslake.config import load_settings
from opslake.jobs.consolidator import logs_sql
from opslake.models.window import Window
from opslake.query.embedded import EmbeddedEngine
from opslake.query.sqltext import window_predicate
from opslake_local.drain import Drainer
from opslake_local.stack import LocalStack

pytestmark = pytest.mark.integration

# ": " inside the operation and the approach: the old packed "operation: approach" split it wrongly
REPORT = {
    "operation": "fill a shift: night crew",
    "approach": "match by role: welder, then by city: Austin",
    "result": "failure",
    "context": "no rows: the city filter was too narrow",
    "task_class": "staffing_fill",
    "endpoint": "/match",
}


@dataclass
class Local:
    stack: LocalStack
    drainer: Drainer
    http: httpx.Client

    def log(self, **change: str) -> str:
        assert self.stack.api_key is not None
        answer = self.http.post(
            "/log", json={**REPORT, **change}, headers={"x-api-key": self.stack.api_key.value}
        )
        assert answer.status_code == 202, answer.text
        return str(answer.json()["op_id"])

    def evidence(self) -> dict[str, LogRow]:
        """The /log rows the consolidator would read from the lake, by op id."""
        assert self.drainer.drain().failed == 0
        settings = load_settings()
        now = datetime.now(UTC)
        window = Window(now - timedelta(hours=1), now + timedelta(minutes=1))
        rows = EmbeddedEngine.from_settings(settings).run(logs_sql(settings.ops_table, window)).records()
        return {r["op_id"]: LogRow.model_validate(r) for r in rows}


@pytest.fixture(scope="module")
def logs(local: tuple[LocalStack, httpx.Client, Drainer]) -> Local:
    """The shared local stack (tests/integration/conftest.py), seen as a reporter of /log records."""
    stack, client, drainer = local
    return Local(stack, drainer, client)


def test_an_operation_with_a_colon_round_trips_intact(logs: Local) -> None:
    op_id = logs.log()
    row = logs.evidence()[op_id]
    assert (row.operation, row.approach, row.result, row.output_summary) == (
        REPORT["operation"], REPORT["approach"], "failure", REPORT["context"],
    )  # fmt: skip
    assert (row.endpoint, row.task_class, row.success, row.outcome) == (
        "/match",
        "staffing_fill",
        False,
        "failure",
    )
    assert row.evidence == (
        "fill a shift: night crew: match by role: welder, then by city: Austin → "
        "failure: no rows: the city filter was too narrow"
    )


def test_a_report_without_context_has_no_output_summary(logs: Local) -> None:
    op_id = logs.log(result="lesson", context="", approach="ask /match with a 25 mile radius")
    row = logs.evidence()[op_id]
    assert (row.operation, row.approach, row.result, row.output_summary) == (
        REPORT["operation"], "ask /match with a 25 mile radius", "lesson", None,
    )  # fmt: skip
    assert row.evidence == "fill a shift: night crew: ask /match with a 25 mile radius → lesson"


def test_three_agents_reporting_it_make_one_group_under_the_whole_operation(logs: Local) -> None:
    logged = [logs.log(op_id=f"prov-{i}", result="success", context="") for i in range(3)]
    rows = [row for op_id, row in logs.evidence().items() if op_id in logged]
    # one key for all three: give them distinct agents as three reporters would be
    agents = [row.model_copy(update={"agent_id": f"agent-{i}"}) for i, row in enumerate(rows)]
    (group,) = candidate_groups([], agents)
    assert (group.operation, group.approaches, group.kind) == (
        REPORT["operation"],
        (REPORT["approach"],),
        "do",
    )
    draft = heuristic_draft(group)
    assert (draft.trigger, draft.action) == (REPORT["operation"], REPORT["approach"])


SECRET = "s3cr3t-value-123"


@pytest.mark.parametrize("result", ["success", "failure"])
def test_a_secret_only_recognisable_next_to_its_operation_reaches_neither_record(
    logs: Local, result: str
) -> None:
    """Issue 12: the middleware's record of the /log call stored the request body whole, where the
    plain redaction misses an approach that is a secret only after its operation."""
    op_id = logs.log(
        operation="rotate api_key", approach=SECRET, result=result, context="", op_id=f"sec-{result}"
    )
    assert logs.drainer.drain().failed == 0
    settings = load_settings()
    now = datetime.now(UTC)
    window = Window(now - timedelta(hours=1), now + timedelta(minutes=1))
    sql = f"""SELECT * FROM {settings.ops_table} WHERE {window_predicate(window)}
    AND ((op_id = '{op_id}' AND event_kind = 'log')
      OR (endpoint = '/log' AND source = 'gateway' AND element_at(attributes, 'logged_op_id') = '{op_id}'))"""
    rows = EmbeddedEngine.from_settings(settings).run(sql).records()
    assert sorted(r["source"] for r in rows) == ["agent_log", "gateway"]
    assert all(SECRET not in str(row) for row in rows), rows
    [call] = [r for r in rows if r["source"] == "gateway"]
    assert "rotate api_key" in call["input_summary"]  # what was asked is still said, redacted
