"""The doctor's judgements (pure) and its probe loop over a stubbed HTTP transport."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from opslake.jobs.lease import RunState
from opslake_local.doctor import (
    Check,
    Job,
    Target,
    check_probe,
    judge_alarms,
    judge_api_key,
    judge_dlq,
    judge_job,
    judge_model,
    judge_queue,
    probe_sql,
    render,
)

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
ANALYZER = Job("analyzer", "AnalyzerFunction", "state/analyzer.json", timedelta(minutes=5))


def _job(state: RunState | None, *, running_since: datetime | None = None, job: Job = ANALYZER) -> Check:
    return judge_job(job, state, NOW, running_since=running_since, logs="LOGS", run_now="RUN")


def _committed(ago: timedelta, **lease: Any) -> RunState:
    return RunState(watermark=NOW - ago, committed_at=NOW - ago, **lease)


def test_a_job_committed_within_two_periods_is_ok() -> None:
    check = _job(_committed(timedelta(minutes=9)))
    assert check.status == "ok" and check.detail == "last run committed 9 min ago (it runs every 5 min)"


def test_a_job_not_committed_for_more_than_two_periods_fails() -> None:
    check = _job(_committed(timedelta(minutes=11)))
    assert check.status == "FAIL" and "more than 2 periods" in check.detail
    assert check.fix is not None and "LOGS" in check.fix and "RUN" in check.fix


def test_a_job_that_never_ran_warns_on_a_young_stack_and_fails_on_an_old_one() -> None:
    assert _job(None, running_since=NOW - timedelta(minutes=3)).status == "warn"
    assert _job(None, running_since=None).status == "warn"  # age unknown: no accusation
    old = _job(None, running_since=NOW - timedelta(hours=2))
    assert (
        old.status == "FAIL" and "never completed a run" in old.detail and "started 2.0 h ago" in old.detail
    )


def test_a_stale_job_on_a_stack_restarted_since_is_a_warning() -> None:
    """A local stack restarted from its data: the last commit is from before, the schedule just began."""
    check = _job(_committed(timedelta(hours=3)), running_since=NOW - timedelta(minutes=4))
    assert check.status == "warn" and "the stack started 4 min ago" in check.detail
    assert _job(_committed(timedelta(hours=3)), running_since=NOW - timedelta(minutes=11)).status == "FAIL"


def test_an_expired_lease_is_a_crashed_run() -> None:
    crashed = _committed(timedelta(minutes=4), lease_holder="x", lease_expires=NOW - timedelta(minutes=1))
    check = _job(crashed)
    assert check.status == "warn" and "it crashed or timed out" in check.detail
    running = _job(
        _committed(timedelta(minutes=4), lease_holder="x", lease_expires=NOW + timedelta(minutes=9))
    )
    assert running.status == "ok" and "a run is under way" in running.detail


def test_an_older_state_without_committed_at_is_judged_by_its_watermark() -> None:
    assert _job(RunState(watermark=NOW - timedelta(hours=1))).status == "FAIL"
    assert _job(RunState(watermark=NOW - timedelta(minutes=1))).status == "ok"


def test_a_job_of_unknown_schedule_is_shown_not_judged() -> None:
    check = _job(_committed(timedelta(days=3)), job=Job("analyzer", "AnalyzerFunction", "k", None))
    assert check.status == "ok" and check.detail == "last run committed 72.0 h ago"


def test_queue_age_over_the_threshold_fails() -> None:
    assert judge_queue(3, 1, 301, max_age_s=300, local=False).status == "FAIL"
    ok = judge_queue(3, 1, 299, max_age_s=300, local=False)
    assert ok.status == "ok" and ok.detail == "3 message(s) waiting, 1 in flight; oldest message 299 s old"
    assert "not measured locally" in judge_queue(0, 0, None, max_age_s=300, local=True).detail


def test_any_dlq_message_fails_and_says_how_to_inspect_and_redrive() -> None:
    assert judge_dlq(0, 0, receive="R", redrive="M") == Check("ok", "dlq", "empty")
    check = judge_dlq(2, 1, receive="R", redrive="move them back with M")
    assert check.status == "FAIL" and "holds 3 message(s)" in check.detail and check.fix is not None
    assert "R" in check.fix and "M" in check.fix


def test_alarms() -> None:
    assert judge_alarms([], prefix="s-", local=False).status == "warn"
    assert judge_alarms([], prefix="s-", local=True).status == "ok"
    alarms = [
        {"AlarmName": "s-Dlq", "StateValue": "ALARM", "StateReason": "1 message"},
        {"AlarmName": "s-Errors", "StateValue": "OK"},
        {"AlarmName": "s-Throttles", "StateValue": "INSUFFICIENT_DATA"},
    ]
    firing = judge_alarms(alarms, prefix="s-", local=False)
    assert firing.status == "FAIL" and "1 of 3 alarm(s) in ALARM: s-Dlq (1 message)" in firing.detail
    quiet = judge_alarms(alarms[1:], prefix="s-", local=False)
    assert quiet.status == "ok" and quiet.detail == "2 alarm(s), none in ALARM (1 without data yet)"


@pytest.mark.parametrize(
    ("answer", "status", "words"),
    [
        ({"configured": False}, "warn", "no model configured"),
        (
            {"configured": True, "model": "m", "reachable": True, "circuit_breaker": "closed"},
            "ok",
            "m reachable",
        ),
        ({"configured": True, "model": "m", "reachable": True, "circuit_breaker": None}, "ok", "never used"),
        (
            {"configured": True, "model": "m", "reachable": True, "circuit_breaker": "half_open"},
            "warn",
            "trying",
        ),
        (
            {"configured": True, "model": "m", "reachable": False, "circuit_breaker": "closed"},
            "FAIL",
            "not answer",
        ),
        ({"configured": True, "model": "m", "reachable": True, "circuit_breaker": "open"}, "FAIL", "is open"),
    ],
)
def test_model(answer: dict[str, Any], status: str, words: str) -> None:
    check = judge_model(answer)
    assert check.status == status and words in check.detail


def test_api_key() -> None:
    assert judge_api_key(202, 403, has_key=True).status == "ok"
    open_api = judge_api_key(202, 202, has_key=True)
    assert open_api.status == "FAIL" and "anyone can write" in open_api.detail
    refused = judge_api_key(403, 403, has_key=True)
    assert refused.status == "FAIL" and "refused (403)" in refused.detail
    missing = judge_api_key(None, 403, has_key=False)
    assert missing.status == "FAIL" and missing.fix is not None and "OPSLAKE_API_KEY" in missing.fix


def test_probe_sql_bounds_the_partitions_and_quotes_the_id() -> None:
    assert probe_sql("a'b", NOW) == "SELECT op_id FROM ops WHERE dt >= '2026-11-27' AND op_id = 'a''b'"


class _Sqs:
    """What check_probe asks of SQS when the probe does not show up: the ops queue's depth."""

    def get_queue_attributes(self, **_: Any) -> dict[str, Any]:
        return {
            "Attributes": {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}
        }


def _target(handler: Any) -> Target:
    api = httpx.Client(base_url="http://api", transport=httpx.MockTransport(handler))
    return Target(
        where="test", local=True, stack_name="s", api=api,
        api_key="k", s3=None, sqs=_Sqs(), cloudwatch=None, bucket="b", queue_url="q", dlq_url="d", jobs=[],
        clock=lambda: NOW,
    )  # fmt: skip


def test_the_probe_waits_until_the_op_is_queryable() -> None:
    answers = iter([0, 0, 1])
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append({"key": request.headers.get("x-api-key"), **json.loads(request.content)})
        return httpx.Response(200, json={"row_count": next(answers)})

    clock = iter(range(100))
    check = check_probe(
        _target(handler), "OP", timeout_s=10, poll_s=1, sleep=lambda _: None, monotonic=lambda: next(clock)
    )
    assert check.status == "ok" and check.detail.startswith("op OP queryable after")
    assert len(seen) == 3 and all(s["key"] == "k" and "op_id = 'OP'" in s["sql"] for s in seen)


def test_a_probe_that_never_shows_up_fails_after_the_timeout() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(503, json={"message": "busy"})

    clock = iter(range(100))
    check = check_probe(
        _target(handler), "OP", timeout_s=3, poll_s=1, sleep=lambda _: None, monotonic=lambda: next(clock)
    )
    assert check.status == "FAIL" and "not queryable after 3 s" in check.detail
    assert "POST /sql answered 503" in check.detail and "the ops queue is empty" in check.detail
    assert len(calls) == 3  # at 1, 2 and 3 s of the fake clock, then it gives up


def test_render_puts_the_fix_under_its_check_and_counts() -> None:
    text = render(
        [
            Check("ok", "dlq", "empty"),
            Check("FAIL", "probe", "lost", "do this"),
            Check("warn", "model", "none"),
        ]
    )
    assert text.splitlines() == [
        "ok    dlq    empty",
        "FAIL  probe  lost",
        "      -> do this",
        "warn  model  none",
        "1 failed, 1 warning(s), 1 ok",
    ]
    assert json.loads(render([Check("ok", "dlq", "empty")], as_json=True)) == [
        {"status": "ok", "name": "dlq", "detail": "empty", "fix": None}
    ]


def test_the_probe_is_a_report_that_stats_keep_out_of_the_tool_figures() -> None:
    from opslake.insights.stats import REPORT_EVENT_KINDS
    from opslake_local.doctor import PROBE_EVENT_KIND, _probe_op

    assert _probe_op("01HZ")["event_kind"] == PROBE_EVENT_KIND in REPORT_EVENT_KINDS
