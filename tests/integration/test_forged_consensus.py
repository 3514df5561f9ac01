"""The forged consensus of issue 12, end to end on the local stack: one API key posts failures
through ``POST /events`` claiming several agent_ids (beside other keys' ordinary successes of the
same tool, from which a contrast finds the fix); after a consolidator run ``GET /playbooks`` serves
nothing from them. The same evidence from two keys is served; an operator's approval publishes the
single key's entry. (Issue 24: entries come from what fails, so the evidence is failures.)"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from opslake.config import load_settings
from opslake.jobs.consolidator import Consolidator, ConsolidatorRun
from opslake.jobs.lease import StateStore
from opslake.jobs.trigger import Backfill
from opslake.lake.store import S3ObjectStore
from opslake.models.playbooks import PlaybookSnapshot, arm_of
from opslake.query.embedded import EmbeddedEngine
from opslake_local.drain import Drainer
from opslake_local.http import LocalApi
from opslake_local.stack import QUIET_ENV, LocalStack

pytestmark = pytest.mark.integration


@dataclass
class Stack:
    stack: LocalStack
    http: httpx.Client
    drainer: Drainer
    keys: dict[str, str]

    def key(self, name: str) -> str:
        if name not in self.keys:
            self.keys[name] = self.stack.create_api_key(name).value
        return self.keys[name]

    def post(self, key: str, ops: list[dict[str, Any]]) -> None:
        answer = self.http.post("/events", json={"ops": ops}, headers={"x-api-key": self.key(key)})
        assert answer.status_code in (200, 202), answer.text
        assert self.drainer.drain().failed == 0

    def consolidate(self, **settings: Any) -> ConsolidatorRun:
        """One consolidator run over the last hour (a backfill: runs can repeat in one module)."""
        config = load_settings().model_copy(update=settings)
        s3 = self.stack.client("s3")
        now = datetime.now(UTC)
        consolidator = Consolidator(
            settings=config,
            engine=EmbeddedEngine.from_settings(config),
            store=S3ObjectStore(s3, config.lake_bucket),
            state=StateStore(s3, config.lake_bucket, config.consolidator_state_key, lease_s=900),
            glue=self.stack.client("glue"),
        )
        report = consolidator.run(Backfill(since=now - timedelta(hours=1), until=now + timedelta(minutes=5)))
        assert report.status == "ok", report
        return report

    def served(self, endpoint: str) -> list[dict[str, Any]]:
        """What GET /playbooks offers a reader: the entries it serves the key "reader" plus those its
        holdout arms withhold from it (issue 16), i.e. what the consolidator published for service."""
        answer = self.http.get(
            "/playbooks", params={"endpoint": endpoint}, headers={"x-api-key": self.key("reader")}
        )
        assert answer.status_code == 200, answer.text
        settings = load_settings()
        body = self.stack.client("s3").get_object(Bucket=settings.lake_bucket, Key=settings.playbooks_key)
        offered = PlaybookSnapshot.model_validate_json(body["Body"].read()).select(endpoint=endpoint)
        treatment = [
            e.entry_id for e in offered if arm_of("reader", e, settings.playbook_holdout_salt) == "treatment"
        ]
        assert [e["entry_id"] for e in answer.json()["entries"]] == treatment  # the rest is withheld
        return [e.served() for e in offered]


@pytest.fixture(scope="module")
def lake() -> Iterator[Stack]:
    """A local stack whose GET /playbooks re-reads the snapshot on every call (no 60 s cache)."""
    env = {**QUIET_ENV, "OPSLAKE_QUERY_ENGINE": "embedded", "OPSLAKE_SNAPSHOT_CACHE_S": "0"}
    with LocalStack(env_overrides=env) as stack:
        invoker = stack.invoker()
        api = LocalApi(stack, invoker)
        base_url = api.start()
        try:
            with httpx.Client(base_url=base_url, timeout=60) as client:
                yield Stack(stack, client, Drainer(stack, invoker), {})
        finally:
            api.stop()


def forged_ops(endpoint: str, agents: range, *, text: str, error: str | None = None) -> list[dict[str, Any]]:
    """Ops of a runtime's own tool, each claiming its own agent_id (what any client may write):
    failed with ``error`` when given, else successful."""
    return [
        {
            "endpoint": endpoint,
            "success": error is None,
            "duration_ms": 12.0,
            "agent_id": f"agent-{i}",
            "task_class": "forged_consensus",
            "input_summary": text,
            **({"error": error, "error_type": "bad_request"} if error else {}),
        }
        for i in agents
    ]


def ordinary_successes(lake: Stack, tool: str) -> None:
    """Two honest keys' successful calls of ``tool``, sending its ``date`` (the catalog learns the
    tool and its arguments from them)."""
    for key in ("honest-a", "honest-b"):
        lake.post(key, forged_ops(tool, range(3), text=GOOD))


GOOD = '{"room":"RM-101","date":"2026-12-01"}'
BAD = '{"room":"RM-101"}'
MISSING = "missing required argument: date"


def test_one_key_claiming_four_agents_is_not_served_until_approved(lake: Stack) -> None:
    ordinary_successes(lake, "tool:book_room")
    lake.post("mallory", forged_ops("tool:book_room", range(4), text=BAD, error=MISSING))
    report = lake.consolidate()
    assert report.contrast_candidates >= 1 and len(report.entries_created) == 1
    assert lake.served("tool:book_room") == []  # before issue 12: served to every key, "4 agents"
    assert report.active_entries == 0 and report.proposed_entries == 1
    (entry_id,) = report.entries_created
    rows = EmbeddedEngine.from_settings(load_settings()).run(
        "SELECT status, evidence_agent_count, evidence_reporter_count, evidence_reporters, approved_at, action "
        f"FROM playbooks WHERE entry_id = '{entry_id}'"
    )
    [row] = rows.records()
    assert (row["status"], row["evidence_reporter_count"], row["action"]) == (
        "proposed", 1, "Send date in the tool:book_room arguments",
    )  # fmt: skip
    assert row["evidence_agent_count"] >= 4  # claimed agents of both sides; the reporters are mallory's
    assert list(row["evidence_reporters"]) == ["mallory"] and row["approved_at"] is None

    # a second run over the same evidence changes nothing
    assert lake.consolidate().active_entries == 0 and lake.served("tool:book_room") == []

    # the operator reads it and approves it: from then on it is served
    consolidator = Consolidator(
        settings=load_settings(),
        engine=EmbeddedEngine.from_settings(load_settings()),
        store=S3ObjectStore(lake.stack.client("s3"), load_settings().lake_bucket),
        state=StateStore(
            lake.stack.client("s3"),
            load_settings().lake_bucket,
            load_settings().consolidator_state_key,
            lease_s=900,
        ),
    )
    approved = consolidator.approve(entry_id)
    assert approved.status == "active" and approved.approved_at is not None
    assert [e["entry_id"] for e in lake.served("tool:book_room")] == [entry_id]
    assert lake.consolidate().entries_withheld == []  # an approved entry stays served


def test_two_keys_are_two_reporters_and_are_served(lake: Stack) -> None:
    ordinary_successes(lake, "tool:book_hall")
    lake.post("alice", forged_ops("tool:book_hall", range(2), text=BAD, error=MISSING))
    lake.post("bob", forged_ops("tool:book_hall", range(2, 4), text=BAD, error=MISSING))
    lake.consolidate()
    (entry,) = lake.served("tool:book_hall")
    assert (entry["evidence_reporter_count"], entry["status"], entry["fix_kind"]) == (
        2,
        "active",
        "missing_argument",
    )


def test_a_runtime_key_counts_its_agents_and_an_untrusted_key_counts_for_nothing(lake: Stack) -> None:
    ordinary_successes(lake, "tool:book_desk")
    lake.post("fleet", forged_ops("tool:book_desk", range(3), text=BAD, error=MISSING))
    trust = {"fleet": "untrusted"}
    report = lake.consolidate(reporter_trust=trust)
    assert report.entries_created == [] and lake.served("tool:book_desk") == []  # no candidate at all
    lake.consolidate(reporter_trust={"fleet": "runtime"})
    (entry,) = lake.served("tool:book_desk")
    assert entry["evidence_reporter_count"] == 3
    # marking the key untrusted later takes the entry out of service at the next run
    report = lake.consolidate(reporter_trust=trust)
    assert report.entries_withheld == [entry["entry_id"]] and lake.served("tool:book_desk") == []
