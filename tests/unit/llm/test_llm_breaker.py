"""The LLM circuit breaker and usage ledger: pure logic over an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from opslake.llm import CircuitBreaker, UsageLedger
from opslake.llm.keys import _key_from_secret, key_source
from opslake.models.llm import LlmState, TokenBucket


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def breaker(clock: Clock, **kwargs: object) -> CircuitBreaker:
    return CircuitBreaker(failure_threshold=3, cooldown_s=900, clock=clock, **kwargs)  # type: ignore[arg-type]


def test_opens_after_n_consecutive_failures_and_refuses_calls() -> None:
    clock = Clock()
    b = breaker(clock)
    for _ in range(2):
        assert b.allow()
        b.record_failure()
        assert b.state == "closed"
    assert b.allow()
    b.record_failure()
    assert (b.state, b.opened_at, b.consecutive_failures) == ("open", clock.now, 3)
    clock.now += 899
    assert not b.allow()
    assert b.seconds_until_trial() == pytest.approx(1)


def test_a_success_resets_the_count_of_consecutive_failures() -> None:
    b = breaker(Clock())
    for outcome in ("fail", "fail", "ok", "fail", "fail"):
        assert b.allow()
        b.record_failure() if outcome == "fail" else b.record_success()
    assert (b.state, b.consecutive_failures) == ("closed", 2)


def test_half_open_after_cooldown_lets_exactly_one_trial_through_and_success_closes() -> None:
    clock = Clock()
    b = breaker(clock, state="open", consecutive_failures=3, opened_at=clock.now)
    clock.now += 900
    assert b.state == "half_open"
    assert b.allow()
    assert not b.allow()  # the trial is still out
    b.record_success()
    assert (b.state, b.consecutive_failures, b.opened_at) == ("closed", 0, None)
    assert b.allow() and b.allow()


def test_a_failed_trial_reopens_for_another_full_cooldown() -> None:
    clock = Clock()
    b = breaker(clock, state="open", consecutive_failures=3, opened_at=clock.now - 1000)
    assert b.allow()
    b.record_failure()
    assert (b.state, b.opened_at) == ("open", clock.now)
    clock.now += 899
    assert not b.allow()
    clock.now += 1
    assert b.allow()


def test_a_released_trial_can_be_taken_again() -> None:
    b = breaker(Clock(), state="half_open")
    assert b.allow()
    b.release()
    assert b.allow()
    assert not b.allow()


def test_an_open_state_without_a_time_waits_a_full_cooldown() -> None:
    clock = Clock()
    b = breaker(clock, state="open")
    assert not b.allow()
    clock.now += 900
    assert b.allow()


def test_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError):
        CircuitBreaker(failure_threshold=0)


def test_ledger_keeps_24_hourly_buckets_and_prunes_older_ones() -> None:
    start = datetime(2026, 11, 21, 10, 30, tzinfo=UTC)
    ledger = UsageLedger()
    ledger.add_tokens(start, 100, 10)
    ledger.add_tokens(start + timedelta(minutes=20), 50, 5)  # same hour
    ledger.add_tokens(start + timedelta(hours=1), 7, 1)
    assert ledger.tokens_24h(start + timedelta(hours=1)) == (157, 16)
    assert [b.hour.hour for b in ledger.buckets(start + timedelta(hours=1))] == [10, 11]
    # 23 hours after 10:xx the 10:00 bucket is still within the window; at 24 hours it is gone
    assert ledger.tokens_24h(start + timedelta(hours=23)) == (157, 16)
    assert ledger.tokens_24h(start + timedelta(hours=24)) == (7, 1)
    assert ledger.tokens_24h(start + timedelta(hours=25)) == (0, 0)


def test_ledger_restores_buckets_and_outcomes_from_a_saved_state() -> None:
    hour = datetime(2026, 11, 21, 10, tzinfo=UTC)
    ledger = UsageLedger(
        buckets=[TokenBucket(hour=hour, tokens_in=5, tokens_out=2)], recent_failed=[True, False]
    )
    ledger.add_tokens(hour + timedelta(minutes=5), 1, 1)
    assert ledger.tokens_24h(hour) == (6, 3)
    assert ledger.error_rate == 0.5


def test_error_rate_covers_only_the_last_50_calls() -> None:
    ledger = UsageLedger()
    assert ledger.error_rate == 0.0
    for _ in range(50):
        ledger.add_outcome(True)
    for _ in range(40):
        ledger.add_outcome(False)
    assert ledger.error_rate == pytest.approx(10 / 50)
    assert len(ledger.recent_failed) == 50


def test_an_older_state_object_still_loads_with_defaults() -> None:
    state = LlmState.model_validate(
        {"circuit_breaker": "open", "recent_error_rate": 1.0, "updated_at": "2026-11-21T10:00:00Z"}
    )
    assert (state.consecutive_failures, state.opened_at, state.token_buckets) == (0, None, [])


@pytest.mark.parametrize(
    ("parameter", "expected"),
    [
        ("", None),
        ("/opslake/llm-api-key", ("ssm", "/opslake/llm-api-key")),
        ("opslake-llm-key", ("ssm", "opslake-llm-key")),
        ("secret:opslake/llm", ("secretsmanager", "opslake/llm")),
        (
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:llm-AbCdEf",
            ("secretsmanager", "arn:aws:secretsmanager:us-east-1:123456789012:secret:llm-AbCdEf"),
        ),
    ],
)
def test_key_source_by_the_parameter_name(parameter: str, expected: tuple[str, str] | None) -> None:
    assert key_source(parameter) == expected


def test_a_secret_may_hold_the_key_or_a_json_object_with_it() -> None:
    assert _key_from_secret(" sk-plain \n") == "sk-plain"
    assert _key_from_secret('{"api_key": "sk-json", "org": "o"}') == "sk-json"
    assert _key_from_secret('{"whatever": "sk-only"}') == "sk-only"
