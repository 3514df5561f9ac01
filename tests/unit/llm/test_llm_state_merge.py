"""Merging one writer's changes into the shared LLM state: pure logic, no S3."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from opslake.llm.ledger import BreakerView, LlmChanges, merge_state
from opslake.models.llm import LlmState, TokenBucket

NOW = datetime(2026, 11, 28, 12, 30, tzinfo=UTC)
HOUR = NOW.replace(minute=0)


def stored(**fields: object) -> LlmState:
    return LlmState.model_validate(
        {"circuit_breaker": "closed", "recent_error_rate": 0.0, "updated_at": NOW, "model": "m", **fields}
    )


def opened(at: datetime, **fields: object) -> LlmState:
    return stored(
        circuit_breaker="open", consecutive_failures=3, opened_at=at, breaker_changed_at=at, **fields
    )


def view(state: str, at: datetime | None, failures: int = 0) -> BreakerView:
    return BreakerView(state, failures, at if state != "closed" else None, at)  # type: ignore[arg-type]


def test_tokens_and_outcomes_add_to_what_is_stored_whoever_wrote_it() -> None:
    latest = stored(
        token_buckets=[TokenBucket(hour=HOUR, tokens_in=100, tokens_out=10)],
        recent_calls_failed=[False, True],
    )
    changes = LlmChanges(
        tokens=[
            TokenBucket(hour=HOUR, tokens_in=7, tokens_out=1),
            TokenBucket(hour=HOUR - timedelta(hours=1), tokens_in=3, tokens_out=0),
        ],
        outcomes=[False, False],
        breaker=view("closed", None),
    )
    merged = merge_state(latest, changes, now=NOW, model="m")
    assert (merged.tokens_in_24h, merged.tokens_out_24h) == (110, 11)
    assert [(b.hour, b.tokens_in) for b in merged.token_buckets] == [
        (HOUR - timedelta(hours=1), 3),
        (HOUR, 107),
    ]
    assert merged.recent_calls_failed == [False, True, False, False]
    assert merged.recent_error_rate == 0.25


def test_the_outcome_window_keeps_the_newest_calls() -> None:
    latest = stored(recent_calls_failed=[True] * 4)
    merged = merge_state(latest, LlmChanges(outcomes=[False] * 3), now=NOW, model="m", window=5)
    assert merged.recent_calls_failed == [True, True, False, False, False]


def test_a_writer_that_read_before_the_breaker_opened_does_not_close_it() -> None:
    read_at = NOW - timedelta(minutes=20)
    latest = opened(NOW - timedelta(minutes=10))
    # it made calls (one failure, then a success) but its breaker never changed state since its read
    stale = LlmChanges(outcomes=[True, False], breaker=view("closed", None), last_error="502")
    merged = merge_state(latest, stale, now=NOW, model="m")
    assert (merged.circuit_breaker, merged.opened_at, merged.consecutive_failures) == (
        "open", latest.opened_at, 3
    )  # fmt: skip
    assert merged.recent_calls_failed == [True, False] and merged.last_error == "502"
    # nor does one whose own last change (a close) is older than the opening
    older_close = LlmChanges(outcomes=[False], breaker=view("closed", read_at))
    assert merge_state(latest, older_close, now=NOW, model="m").circuit_breaker == "open"


def test_the_later_state_change_wins_either_way() -> None:
    latest = opened(NOW - timedelta(minutes=10))
    trial_closed = LlmChanges(outcomes=[False], breaker=view("closed", NOW - timedelta(minutes=1)))
    merged = merge_state(latest, trial_closed, now=NOW, model="m")
    assert (merged.circuit_breaker, merged.opened_at, merged.consecutive_failures) == ("closed", None, 0)
    assert merged.breaker_changed_at == NOW - timedelta(minutes=1)

    reopened = LlmChanges(outcomes=[True], breaker=view("open", NOW - timedelta(minutes=2), failures=4))
    merged = merge_state(stored(), reopened, now=NOW, model="m")
    assert (merged.circuit_breaker, merged.consecutive_failures) == ("open", 4)


def test_without_another_writers_change_the_writers_count_stands_and_no_call_changes_nothing() -> None:
    latest = stored(consecutive_failures=1)
    counted = LlmChanges(outcomes=[True], breaker=view("closed", None, failures=2))
    assert merge_state(latest, counted, now=NOW, model="m").consecutive_failures == 2
    untouched = merge_state(latest, LlmChanges(), now=NOW, model="other")
    assert (untouched.consecutive_failures, untouched.model) == (1, "m")


def test_a_state_saved_before_changes_were_timed_counts_as_changed_when_it_opened() -> None:
    legacy = stored(circuit_breaker="open", consecutive_failures=3, opened_at=NOW - timedelta(minutes=5))
    before = LlmChanges(outcomes=[False], breaker=view("closed", NOW - timedelta(minutes=6)))
    after = LlmChanges(outcomes=[False], breaker=view("closed", NOW - timedelta(minutes=4)))
    assert merge_state(legacy, before, now=NOW, model="m").circuit_breaker == "open"
    assert merge_state(legacy, after, now=NOW, model="m").circuit_breaker == "closed"


def test_the_breaker_notes_when_its_state_changes_and_only_then() -> None:
    from opslake.llm import CircuitBreaker

    now = [1_800_000_000.0]
    b = CircuitBreaker(failure_threshold=2, cooldown_s=60, clock=lambda: now[0])
    b.record_success()
    assert b.changed_at is None  # closed stays closed
    b.record_failure()
    now[0] += 1
    b.record_failure()
    assert (b.state, b.changed_at) == ("open", now[0])
    now[0] += 60
    assert b.allow() and b.changed_at == now[0]  # the trial: half_open
    now[0] += 1
    b.record_success()
    assert (b.state, b.changed_at) == ("closed", now[0])
