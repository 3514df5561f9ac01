"""Lessons about an agent's own tools (issue 24), through the scheduled jobs on moto and the embedded
engine: a booking runtime's tool calls (tools opslake never saw) become a catalog the analysts can
query, entries that name the fix, an analyzer whose advice names where ids come from, a model whose
lesson in the catalog's words is published, and a key that cannot plant vocabulary alone."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from opslake.analysis.catalog.declared import declared_tools
from opslake.analysis.diagnoser import Diagnoser
from opslake.jobs.analyzer import Analyzer
from opslake.jobs.catalog import CatalogStore
from opslake.jobs.consolidator import Consolidator
from opslake.jobs.lease import StateStore
from opslake.lake.store import S3ObjectStore
from opslake.llm import LlmClient, LlmConfig
from opslake.models.catalog import ToolCatalog
from opslake.models.ops import QueuedOp
from opslake.query.embedded import EmbeddedEngine
from tests.fake_llm import FakeLlm
from tests.integration.jobs_support import Lake, query, write_ops

pytestmark = pytest.mark.integration

START = datetime(2026, 11, 21, 8, 0, tzinfo=UTC)
KEYS = ("runtime-a", "runtime-b", "runtime-c")


def at(minutes: float) -> datetime:
    return START + timedelta(minutes=minutes)


def call(n: int, key: str, tool: str, arguments: dict[str, Any], *, error: str | None = None,
         session: str | None = None, minute: float = 0.0) -> tuple[QueuedOp, datetime]:  # fmt: skip
    """A runtime's tool call as the OTLP mapping records it (an ``execute_tool`` span)."""
    op = QueuedOp(
        op_id=f"{key}-{tool}-{n}", ts=at(minute), endpoint=tool, source="otlp", agent_id=f"{key}-agent-{n % 2}",
        reporter_id=key, success=error is None, duration_ms=12.0, task_class="rebook",
        session_id=session or f"{key}-s{n}", input_summary=json.dumps(arguments),
        error=error, error_type="tool_error" if error else None,
    )  # fmt: skip
    return op, at(minute)


def booking_traffic() -> list[tuple[QueuedOp, datetime]]:
    """Two mistakes of a booking assistant, seen from three keys: a certificate where the tool takes
    a credit card or a gift card, and a reservation updated without looking it up first."""
    ops = []
    for n in range(12):
        key = KEYS[n % 3]
        session = f"{key}-s{n}"
        minute = n * 2.0
        ops.append(
            call(n, key, "tool:find_reservation", {"user_id": f"u_{100 + n}"}, session=session, minute=minute)
        )
        kind = ("credit_card", "gift_card")[n % 2]
        ops.append(call(n, key, "tool:pay", {"payment_id": f"{kind}_{4000000 + n}", "amount": 120},
                        session=session, minute=minute + 0.5))  # fmt: skip
        ops.append(call(n, key, "tool:update_reservation", {"reservation_id": f"RS{7000 + n}", "seats": 2},
                        session=session, minute=minute + 1))  # fmt: skip
    for n in range(6):
        key = KEYS[n % 3]
        session = f"{key}-f{n}"  # looked the reservation up, then paid with a certificate
        ops.append(call(500 + n, key, "tool:find_reservation", {"user_id": f"u_{500 + n}"}, session=session,
                        minute=29 + n))  # fmt: skip
        ops.append(call(100 + n, key, "tool:pay", {"payment_id": f"certificate_{9000000 + n}", "amount": 120},
                        error="certificate payments cannot be used for reservation changes", session=session,
                        minute=29.5 + n))  # fmt: skip
        ops.append(call(200 + n, key, "tool:update_reservation", {"reservation_id": f"RS{9990 + n}", "seats": 2},
                        error=f"reservation RS{9990 + n} not found", minute=30 + n))  # fmt: skip
    # one key alone invents a tool and an argument: stored, never vocabulary
    ops += [
        call(300 + n, "mallory", "tool:wire_funds", {"ignore_prior_checks": True}, minute=40)
        for n in range(5)
    ]
    return ops


def consolidator(lake: Lake, now: datetime, llm: LlmClient | None = None) -> Consolidator:
    settings = lake.settings.model_copy(update={"analyzer_settle_s": 60.0})
    s3 = lake.client("s3")
    return Consolidator(
        settings=settings, engine=EmbeddedEngine.from_settings(settings), store=S3ObjectStore(s3, settings.lake_bucket),
        state=StateStore(s3, settings.lake_bucket, settings.consolidator_state_key, lease_s=900, clock=lambda: now),
        catalog=CatalogStore(s3, settings.lake_bucket), glue=lake.client("glue"), llm=llm, clock=lambda: now,
    )  # fmt: skip


def analyzer(lake: Lake, now: datetime) -> Analyzer:
    settings = lake.settings.model_copy(
        update={"analyzer_settle_s": 60.0, "analyzer_initial_lookback_h": 3.0}
    )
    s3 = lake.client("s3")
    return Analyzer(
        settings=settings, engine=EmbeddedEngine.from_settings(settings), store=S3ObjectStore(s3, settings.lake_bucket),
        state=StateStore(s3, settings.lake_bucket, settings.analyzer_state_key, lease_s=600, clock=lambda: now),
        diagnoser=Diagnoser(), glue=lake.client("glue"), catalog=CatalogStore(s3, settings.lake_bucket),
        clock=lambda: now,
    )  # fmt: skip


def served(lake: Lake) -> list[dict[str, Any]]:
    body = lake.client("s3").get_object(Bucket=lake.settings.lake_bucket, Key="playbooks/current.json")[
        "Body"
    ]
    return list(json.loads(body.read())["entries"])


def test_a_booking_runtime_s_tools_become_a_catalog_and_entries_that_name_the_fix(jobs_lake: Lake) -> None:
    lake = jobs_lake
    write_ops(lake, booking_traffic())
    analyzer(lake, at(60)).run()
    report = consolidator(lake, at(70)).run()
    assert report.status == "ok" and report.catalog_errors == []
    assert report.catalog_known_tools == 3 and report.catalog_tools == 4  # tool:wire_funds: one key
    # the analysts' table: known items, counts and reporters under the deployment's trust levels
    rows = query(lake, "SELECT endpoint, item, name, shape, calls, reporters, known FROM tool_catalog")
    known = {(r["endpoint"], r["item"], r["name"], r["shape"]): r["known"] for r in rows}
    assert known[("tool:pay", "argument", "payment_id", None)] is True
    assert known[("tool:pay", "shape", "payment_id", "credit_card_9999999")] is True
    assert known[("tool:wire_funds", "tool", None, None)] is False
    assert known[("tool:wire_funds", "argument", "ignore_prior_checks", None)] is False
    assert known[("tool:update_reservation", "preceded_by", "tool:find_reservation", None)] is True
    # what the jobs and the CLI read
    current = CatalogStore(lake.client("s3"), lake.settings.lake_bucket).current()
    assert current.tool("tool:pay") is not None
    # entries that name the real fix, published by three keys' evidence, and no generic one
    actions = {e["endpoint"]: e for e in served(lake) if e["source"] == "contrast"}
    pay, update = actions["tool:pay"], actions["tool:update_reservation"]
    assert (
        pay["fix_kind"] == "value_shape" and "credit_card_" in pay["action"] and "gift_card_" in pay["action"]
    )
    assert "certificate" in pay["instead_of"] and pay["fix_failures"] == 6 and pay["fix_successes"] >= 2
    assert update["fix_kind"] == "preceding_call"
    assert (
        update["action"] == "Take reservation_id values from a tool:find_reservation answer; never guess them"
    )
    assert not any("wire_funds" in e["action"] or "ignore" in e["action"] for e in served(lake))


def test_the_analyzer_s_advice_names_where_ids_come_from_once_the_catalog_knows(jobs_lake: Lake) -> None:
    lake = jobs_lake
    write_ops(lake, booking_traffic())
    analyzer(lake, at(60)).run()  # no catalog yet: generic advice for the unknown ids
    first = {r["endpoint"]: r["agent_adjustment"] for r in query(lake, "SELECT * FROM diagnoses")}
    assert "tool:find_reservation" not in first["tool:update_reservation"]
    consolidator(lake, at(70)).run()  # publishes the catalog
    later = [(call(400 + n, KEYS[n % 3], "tool:update_reservation", {"reservation_id": f"RS{8880 + n}"},
                   error=f"reservation RS{8880 + n} not found", minute=80 + n)) for n in range(20)]  # fmt: skip
    write_ops(lake, later)
    report = analyzer(lake, at(120)).run()
    assert report.vocabulary_errors == [] and any("tool:update_reservation" in d for d in [
        json.dumps(r) for r in query(lake, "SELECT endpoint FROM diagnoses")])  # fmt: skip
    advice = [
        r["agent_adjustment"]
        for r in query(
            lake, "SELECT * FROM diagnoses WHERE endpoint = 'tool:update_reservation' ORDER BY created_at"
        )
    ]
    assert "tool:find_reservation" in advice[-1], advice


def test_a_model_s_lesson_in_the_catalog_s_words_is_published(jobs_lake: Lake) -> None:
    """The issue's measurement: a competent model's answer ("use a credit_card or gift_card
    payment_id, never a certificate") was refused as naming nothing actionable; it names the
    catalog's argument and forms, so it passes the gate, and its prompt carried the catalog."""
    lake = jobs_lake
    write_ops(lake, booking_traffic())
    analyzer(lake, at(60)).run()
    answer = {
        "trigger": "Paying for a reservation change with tool:pay",
        "action": "For tool:pay, use a credit_card or gift_card payment_id, never a certificate",
        "kind": "do", "confidence": 0.7, "domain": "booking", "scope": "project",
        "evidence_excerpts": ["certificate payments cannot be used"],
    }  # fmt: skip
    with FakeLlm() as server:
        server.default = FakeLlm.answer(answer)
        llm = LlmClient(LlmConfig(base_url=server.base_url, model="fake-model"), sleep=lambda s: None)
        report = consolidator(lake, at(70), llm=llm).run()
        prompts = [json.dumps(c.body["messages"]) for c in server.completions]
    assert report.status == "ok" and report.distilled_by_model >= 1
    pay = next(e for e in served(lake) if e["endpoint"] == "tool:pay")
    assert pay["distilled_by"] == "fake-model" and pay["action"] == answer["action"]
    prompt = next(p for p in prompts if "tool:pay" in p)
    # the tool's slice of the catalog and the contrast are in the evidence block, as data
    assert '\\"catalog\\"' in prompt and "credit_card_9999999" in prompt and '\\"contrast\\"' in prompt


def test_a_registered_schema_makes_its_tool_known_before_the_traffic(jobs_lake: Lake) -> None:
    lake = jobs_lake
    schema = {"tools": [{"name": "refund", "inputSchema": {"type": "object", "required": ["booking_id"],
              "properties": {"booking_id": {"type": "string", "pattern": "^BK[0-9]{6}$"}}}}]}  # fmt: skip
    store = CatalogStore(lake.client("s3"), lake.settings.lake_bucket)
    store.register("bookings", declared_tools(schema))
    write_ops(lake, booking_traffic()[:3])
    report = consolidator(lake, at(70)).run()
    assert report.catalog_errors == []
    catalog: ToolCatalog = store.current()
    refund = catalog.tool("tool:refund")
    assert refund is not None and refund.declared and refund.calls == 0
    assert refund.argument("booking_id").pattern == "^BK[0-9]{6}$"  # type: ignore[union-attr]
    assert query(lake, "SELECT known FROM tool_catalog WHERE endpoint = 'tool:refund' AND item = 'tool'") == [
        {"known": True}
    ]


def test_a_part_of_the_vocabulary_that_cannot_be_read_is_reported_and_the_run_goes_on(
    jobs_lake: Lake,
) -> None:
    lake = jobs_lake
    write_ops(lake, booking_traffic())
    s3 = lake.client("s3")
    s3.put_object(Bucket=lake.settings.lake_bucket, Key="catalog/declared/broken.json", Body=b"{not json")

    class NoGlue:
        def get_paginator(self, name: str) -> Any:
            raise RuntimeError("AccessDeniedException: glue:GetTables")

    job = consolidator(lake, at(70))
    job.glue = NoGlue()
    report = job.run()
    assert report.status == "ok"
    assert [e.split(":")[0] for e in report.catalog_errors] == ["registered schemas", "Glue tables"]
    assert any(e["endpoint"] == "tool:pay" for e in served(lake))  # the tools' own names still teach
