"""The service desk's fleet, in process (no stack, no socket): plans are drawn before a task runs,
so the same seed gives the same plans and rolls whatever ``GET /playbooks`` answers; a planted
mistake, made, fails at its tool with its rule and the tool's own way of failing, as an
``execute_tool`` span of the task's trace; a retry after it shows what changed; an entry carrying a
mistake's fix switches it off and is reported as followed."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes.session_attributes import SESSION_ID
from opentelemetry.trace import StatusCode

from opslake.otlp.mapping import OPSLAKE_ENDPOINT, OPSLAKE_PREFIX
from opslake_local.simulator import FOLLOWED_ENDPOINT, CycleStats, SimAgent
from opslake_local.worlds.helpdesk import MODES, NOISE, TOOLS, HelpdeskFleet

pytestmark = pytest.mark.unit

BASE = "http://desk.test"
#: One entry per mistake, each carrying its fix in the words a contrast would write.
FIXING = [
    {"entry_id": f"pb_{i}", "trigger": "t", "action": action, "endpoint": f"tool:{tool}", "confidence": 0.6}
    for i, (tool, action) in enumerate([
        ("get_customer", "Send customer_id of the form CUS- + 6 digits"),
        ("create_ticket", "Send category, and priority as one of low, normal, high, urgent"),
        ("close_ticket", "Call tool:add_comment before tool:close_ticket"),
        ("update_ticket", "Call tool:search_tickets before tool:update_ticket; leave out assignee"),
        ("schedule_visit", "Send date as YYYY-MM-DD, Monday to Friday only"),
    ])
]  # fmt: skip


class Playbooks:
    """The fake ``GET /playbooks``: the same ``entries`` for everyone; keeps the queries it got."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.entries, self.queries = entries, []  # type: ignore[var-annotated]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/playbooks", request.url
        self.queries.append(dict(request.url.params) | {"key": request.headers["x-api-key"]})
        return httpx.Response(200, json={"entries": self.entries})


def agents(mistakes: Callable[[str], float], count: int = 3, rescue: float = 1.0) -> list[SimAgent]:
    return [
        SimAgent(f"hd-{i}", f"key-{i}", {m: mistakes(m) for m in MODES}, rescue_rate=rescue)
        for i in range(count)
    ]


def run(
    entries: list[dict[str, Any]],
    fleet_agents: list[SimAgent],
    *,
    cycles: int = 2,
    tasks: int = 8,
    seed: int = 3,
) -> tuple[HelpdeskFleet, list[CycleStats], list[ReadableSpan], Playbooks]:
    exporter, server = InMemorySpanExporter(), Playbooks(entries)
    http = httpx.Client(base_url=BASE, transport=httpx.MockTransport(server))
    fleet = HelpdeskFleet(BASE, fleet_agents, seed=seed, http=http, exporter_for=lambda _agent: exporter)
    with fleet:
        stats = [fleet.run_cycle(tasks) for _ in range(cycles)]
    http.close()
    return fleet, stats, list(exporter.get_finished_spans()), server


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def tool_spans(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return sorted(
        (s for s in spans if attrs(s).get(gen_ai.GEN_AI_OPERATION_NAME) == "execute_tool"),
        key=lambda s: s.start_time or 0,
    )


@pytest.fixture(scope="module")
def every_mistake() -> Iterator[tuple[HelpdeskFleet, list[CycleStats], list[ReadableSpan], Playbooks]]:
    """Every mistake always rolled, every failed step retried, no entry served."""
    yield run([], agents(lambda _m: 1.0))


def test_the_same_seed_plans_the_same_whatever_the_server_answers() -> None:
    profile = agents(lambda m: MODES[m].base_rate, count=4, rescue=0.7)
    blind, blind_stats, _, _ = run([], profile, cycles=3, tasks=5)
    served, served_stats, _, _ = run(FIXING, profile, cycles=3, tasks=5)
    for cycle in (1, 2, 3, 4):
        assert blind.plans(cycle, 5) == served.plans(cycle, 5)
    rolled = [
        sum(plan.rolls[m] for plans in blind.plans(c, 5) for plan in plans) for m in MODES for c in (1, 2, 3)
    ]
    assert sum(rolled) > 0
    # the same tasks; the fleet that was served the fixes made none of the mistakes it rolled (and
    # avoided some the other never reached: a task that failed early ends there)
    for a, b in zip(blind_stats, served_stats, strict=True):
        assert a.tasks == b.tasks
        assert b.mistakes.total() == 0 and a.mistakes.total() > 0
        assert all(a.mistakes[m] <= b.avoided[m] for m in MODES)
        assert b.tool_failures < a.tool_failures


def test_each_planted_mistake_fails_at_its_tool_with_its_rule(
    every_mistake: tuple[HelpdeskFleet, list[CycleStats], list[ReadableSpan], Playbooks],
) -> None:
    _, stats, _, _ = every_mistake
    failed = [c for s in stats for c in s.calls if c.status >= 400]
    causes = {(c.mode, c.route) for c in failed}
    # with every mistake rolled some never show: both date mistakes go into one call, whose form is
    # checked first; a missing category is reported before the priority's case; an agent that
    # guessed a ticket id never saw the ticket, so it names no assignee (each shows alone, below)
    for mode in set(MODES) - {"weekend_visit", "priority_case", "assignee_argument"}:
        assert (mode, f"tool:{MODES[mode].tool}") in causes, mode
    assert {c.mode for c in failed} <= set(MODES) | set(NOISE)
    assert all(c.op_id and c.method == "TOOL" for c in failed)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_mistake_made_alone_fails_once_and_its_retry_works(mode: str) -> None:
    _, stats, spans, _ = run([], agents(lambda m: 1.0 if m == mode else 0.0, count=2), cycles=1, tasks=12)
    failed = [c for c in stats[0].calls if c.status >= 400 and c.mode in MODES]
    made = stats[0].mistakes[mode]
    assert made > 0 and len(failed) == made and {c.mode for c in failed} == {mode}
    assert stats[0].tasks_succeeded == sum(stats[0].tasks.values())  # every retry worked
    # in each session the failing call is followed by a successful call of the same tool
    calls = tool_spans(spans)
    tool = MODES[mode].tool
    for span in calls:
        if span.status.status_code is StatusCode.ERROR or "error" in str(
            attrs(span).get(gen_ai.GEN_AI_TOOL_CALL_RESULT)
        ):
            session = attrs(span)[SESSION_ID]
            later = [
                s
                for s in calls
                if attrs(s)[SESSION_ID] == session and (s.start_time or 0) > (span.start_time or 0)
            ]
            if attrs(span)[gen_ai.GEN_AI_TOOL_NAME] == tool and not _transient(span):
                assert any(attrs(s)[gen_ai.GEN_AI_TOOL_NAME] == tool for s in later), mode


def _transient(span: ReadableSpan) -> bool:
    text = f"{span.status.description} {attrs(span).get(gen_ai.GEN_AI_TOOL_CALL_RESULT)}"
    return "timed out" in text or "rate limit" in text


def test_raising_tools_fail_their_span_and_others_return_the_error_with_status_ok(
    every_mistake: tuple[HelpdeskFleet, list[CycleStats], list[ReadableSpan], Playbooks],
) -> None:
    _, _, spans, _ = every_mistake
    calls = tool_spans(spans)
    assert calls
    raised = [s for s in calls if s.status.status_code is StatusCode.ERROR]
    error_results = ("Error:", '{"error"', '{"ok": false')
    returned = [
        s
        for s in calls
        if s.status.status_code is not StatusCode.ERROR
        and str(attrs(s).get(gen_ai.GEN_AI_TOOL_CALL_RESULT, "")).startswith(error_results)
    ]
    assert {attrs(s)[gen_ai.GEN_AI_TOOL_NAME] for s in raised} >= {"get_customer", "update_ticket"}
    assert {attrs(s)[gen_ai.GEN_AI_TOOL_NAME] for s in returned} >= {
        "create_ticket",
        "close_ticket",
        "schedule_visit",
    }
    for span in raised:
        assert TOOLS[attrs(span)[gen_ai.GEN_AI_TOOL_NAME]].style == "raises"
        assert [e.name for e in span.events] == ["exception"] and attrs(span)["error.type"]
        assert gen_ai.GEN_AI_TOOL_CALL_RESULT not in attrs(span)
    for span in returned:
        assert TOOLS[attrs(span)[gen_ai.GEN_AI_TOOL_NAME]].style != "raises"
    for span in calls:
        json.loads(attrs(span)[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS])  # the arguments as a JSON object
        assert attrs(span)[gen_ai.GEN_AI_TOOL_CALL_ID]


def test_tool_spans_belong_to_their_task_in_order(
    every_mistake: tuple[HelpdeskFleet, list[CycleStats], list[ReadableSpan], Playbooks],
) -> None:
    _, stats, spans, _ = every_mistake
    tasks = {
        s.context.span_id: s for s in spans if attrs(s).get(gen_ai.GEN_AI_OPERATION_NAME) == "invoke_agent"
    }
    assert len(tasks) == sum(s.tasks.total() for s in stats)
    by_session: dict[str, list[ReadableSpan]] = {}
    for span in tool_spans(spans):
        parent = tasks[span.parent.span_id]  # type: ignore[union-attr]
        assert attrs(span)[SESSION_ID] == attrs(parent)[SESSION_ID]
        assert attrs(span)[OPSLAKE_PREFIX + "task_class"] == attrs(parent)[OPSLAKE_PREFIX + "task_class"]
        by_session.setdefault(str(attrs(span)[SESSION_ID]), []).append(span)
    assert len(by_session) == len(tasks)
    for calls in by_session.values():
        starts = [s.start_time or 0 for s in calls]
        assert all(b - a >= 1_000_000 for a, b in itertools.pairwise(starts))  # ms apart
    op_ids = {c.op_id for s in stats for c in s.calls if c.op_id}
    assert len(op_ids) == sum(s.tool_calls for s in stats) == len(tool_spans(spans))
    assert sum(s.spans_exported for s in stats) == len(spans) and not any(s.spans_failed for s in stats)


def test_served_fixes_are_followed_and_reported() -> None:
    _, stats, spans, server = run(FIXING, agents(lambda _m: 1.0), cycles=1, tasks=8)
    assert stats[0].mistakes.total() == 0 and stats[0].tool_failures == sum(
        1 for c in stats[0].calls if c.mode in NOISE
    )
    assert set(stats[0].avoided) == set(MODES)
    followed = [s for s in spans if attrs(s).get(OPSLAKE_ENDPOINT) == FOLLOWED_ENDPOINT]
    assert (
        len(followed) == stats[0].follows_reported == stats[0].playbook_reads == sum(stats[0].tasks.values())
    )
    for span in followed:
        ids = str(attrs(span)["opslake.attributes.entry_ids"]).split(",")
        assert ids and set(ids) <= {e["entry_id"] for e in FIXING}
    # each read names the task's class and comes with the agent's own key
    assert {q["task_class"] for q in server.queries} <= set(stats[0].tasks)
    assert {q["key"] for q in server.queries} == {"key-0", "key-1", "key-2"}
    assert all(q["limit"] == "50" for q in server.queries)


def test_a_fleet_that_never_reads_playbooks_never_asks() -> None:
    exporter, server = InMemorySpanExporter(), Playbooks(FIXING)
    http = httpx.Client(base_url=BASE, transport=httpx.MockTransport(server))
    with HelpdeskFleet(
        BASE, agents(lambda _m: 1.0), http=http, playbooks_enabled=False, exporter_for=lambda _a: exporter
    ) as fleet:
        stats = fleet.run_cycle(4)
    http.close()
    assert server.queries == [] and stats.playbook_reads == 0 and not stats.avoided
    assert stats.mistakes.total() > 0
