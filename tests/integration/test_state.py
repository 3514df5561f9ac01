"""Run state in S3 with conditional writes (moto enforces IfMatch / IfNoneMatch)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from opslake.jobs.lease import LeaseLostError, RunState, StateError, StateStore
from tests.integration.conftest import BUCKET, Aws

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def store(aws: Aws, clock: Clock, key: str = "state/job.json") -> StateStore:
    return StateStore(aws.s3, BUCKET, key, lease_s=600, clock=clock)


def test_first_lease_creates_the_object_and_a_commit_releases_it(aws: Aws) -> None:
    clock = Clock()
    lease = store(aws, clock).acquire("run-1")
    assert lease is not None and lease.state.watermark is None
    assert store(aws, clock).acquire("run-2") is None  # held
    store(aws, clock).commit(lease, watermark=T0, data={"n": 1})
    state, etag = store(aws, clock).read()
    assert (state.watermark, state.data, state.lease_holder, etag is not None) == (T0, {"n": 1}, None, True)
    assert store(aws, clock).acquire("run-2") is not None  # free again


def test_of_two_runs_that_read_the_same_version_only_one_takes_the_lease(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    first, second = store(aws, clock), store(aws, clock)
    first.commit(first.acquire("setup"), watermark=T0, data={})  # type: ignore[arg-type]
    stale = second.read()
    assert first.acquire("run-a") is not None
    monkeypatch.setattr(second, "read", lambda: stale)  # second read before first wrote
    assert second.acquire("run-b") is None


def test_an_expired_lease_is_taken_over_and_the_old_holder_cannot_commit(aws: Aws) -> None:
    clock = Clock()
    slow = store(aws, clock).acquire("slow")
    assert slow is not None
    clock.now = T0 + timedelta(seconds=601)
    fresh = store(aws, clock).acquire("fresh")
    assert fresh is not None
    with pytest.raises(LeaseLostError, match="redoes this window"):
        store(aws, clock).commit(slow, watermark=T0, data={"lost": True})
    store(aws, clock).commit(fresh, watermark=T0 + timedelta(minutes=5), data={"kept": True})
    assert store(aws, clock).read()[0].data == {"kept": True}


def test_release_gives_the_lease_back_without_changing_the_watermark(aws: Aws) -> None:
    clock = Clock()
    lease = store(aws, clock).acquire("a")
    assert lease is not None
    assert store(aws, clock).release(lease)
    state, _ = store(aws, clock).read()
    assert state.lease_holder is None and state.watermark is None


def test_unreadable_state_is_refused_rather_than_overwritten(aws: Aws) -> None:
    aws.s3.put_object(Bucket=BUCKET, Key="state/job.json", Body=b"{not json")
    with pytest.raises(StateError, match="not a valid state object"):
        store(aws, Clock()).acquire()
    assert aws.read("state/job.json") == b"{not json"


def test_s3_failures_are_reported(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(**kwargs: Any) -> None:
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "GetObject")

    monkeypatch.setattr(aws.s3, "get_object", denied)
    with pytest.raises(StateError, match=r"could not be read: .*AccessDenied"):
        store(aws, Clock()).acquire()


def test_state_round_trips_through_json() -> None:
    state = RunState(watermark=T0, data={"x": [1, 2]}, lease_holder="h", lease_expires=T0, committed_at=T0)
    assert RunState.from_json(state.to_json()) == state


def test_a_conflict_status_with_another_code_is_a_lost_race(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 may answer a conditional write's race with 409 and a code such as OperationAborted."""
    lease = store(aws, Clock()).acquire("run-1")
    assert lease is not None

    def aborted(**kwargs: Any) -> None:
        raise ClientError(
            {"Error": {"Code": "OperationAborted"}, "ResponseMetadata": {"HTTPStatusCode": 409}}, "PutObject"
        )

    monkeypatch.setattr(aws.s3, "put_object", aborted)
    with pytest.raises(LeaseLostError):
        store(aws, Clock()).commit(lease, watermark=T0, data={})
