"""The service desk's tools: each rule refuses with the text a real API states, in the tool's own way
(raised, or returned as an error object or an ``Error:`` text with the call otherwise "working"), and
names the rule that fired; careful calls work; transient failures come only when asked for; the
seeded state is the same for the same seed."""

from __future__ import annotations

import json

import pytest

from opslake_local.worlds.helpdesk import TOOLS, HelpdeskWorld, Outcome
from opslake_local.worlds.helpdesk.world import InvalidRequestError, NotFoundError, UpstreamTimeout

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> HelpdeskWorld:
    return HelpdeskWorld(7)


def refused(outcome: Outcome, rule: str) -> None:
    assert outcome.failed and outcome.rule == rule, outcome


def test_the_same_seed_gives_the_same_desk(world: HelpdeskWorld) -> None:
    again, other = HelpdeskWorld(7), HelpdeskWorld(8)
    assert [c.customer_id for c in again.customers] == [c.customer_id for c in world.customers]
    assert [a.asset_tag for a in again.assets] == [a.asset_tag for a in world.assets]
    assert [c.customer_id for c in other.customers] != [c.customer_id for c in world.customers]
    assert all(c.customer_id.startswith("CUS-") and len(c.customer_id) == 10 for c in world.customers)


def test_get_customer_raises_for_an_id_without_its_prefix(world: HelpdeskWorld) -> None:
    customer = world.customers[0]
    number = customer.customer_id.removeprefix("CUS-")
    outcome = world.call("get_customer", {"customer_id": number})
    refused(outcome, "customer_id_form")
    assert isinstance(outcome.raised, InvalidRequestError)
    assert str(outcome.raised) == f"invalid customer_id '{number}'"
    found = world.call("get_customer", {"customer_id": customer.customer_id})
    assert not found.failed and found.result["name"] == customer.name
    missing = world.call("get_customer", {"customer_id": "CUS-000001"})
    assert isinstance(missing.raised, NotFoundError) and missing.rule == "customer_not_found"


def test_a_raising_tool_refuses_missing_and_unknown_arguments_as_python_does(world: HelpdeskWorld) -> None:
    outcome = world.call("get_customer", {})
    refused(outcome, "missing_argument:customer_id")
    assert isinstance(outcome.raised, TypeError)
    assert str(outcome.raised) == "get_customer() missing 1 required argument: 'customer_id'"
    ticket = world.file_ticket("TCK-10001", world.customers[0].customer_id, "password reset", "access")
    outcome = world.call(
        "update_ticket", {"ticket_id": ticket.ticket_id, "team": "network", "assignee": "li.moreau"}
    )
    refused(outcome, "unexpected_argument:assignee")
    assert str(outcome.raised) == "update_ticket() got an unexpected keyword argument 'assignee'"
    assert ticket.team == "service_desk"  # nothing changed
    worked = world.call("update_ticket", {"ticket_id": ticket.ticket_id, "team": "network"})
    assert not worked.failed and ticket.team == "network"


def test_update_ticket_raises_for_a_ticket_that_does_not_exist(world: HelpdeskWorld) -> None:
    outcome = world.call("update_ticket", {"ticket_id": "TCK-93124", "team": "network"})
    refused(outcome, "ticket_not_found")
    assert isinstance(outcome.raised, NotFoundError) and str(outcome.raised) == "ticket TCK-93124 not found"


def test_create_ticket_returns_its_validation_errors_as_an_error_object(world: HelpdeskWorld) -> None:
    customer = world.customers[1].customer_id
    careful = {"customer_id": customer, "subject": "VPN client will not install", "category": "software",
               "priority": "high"}  # fmt: skip
    no_category = world.call("create_ticket", {k: v for k, v in careful.items() if k != "category"})
    refused(no_category, "missing_argument:category")
    assert no_category.raised is None
    assert no_category.result == {"error": "validation failed: category is required"}
    titled = world.call("create_ticket", {**careful, "priority": "High"})
    refused(titled, "priority_enum")
    assert titled.result == {
        "error": "validation failed: priority must be one of low, normal, high, urgent (got 'High')"
    }
    assert titled.error == titled.result["error"]
    created = world.call("create_ticket", careful)
    assert not created.failed and created.result["ticket_id"].startswith("TCK-7")
    assert created.result["ticket_id"] in world.tickets


def test_close_ticket_needs_a_resolution_comment_and_answers_error_text(world: HelpdeskWorld) -> None:
    customer = world.customers[2]
    ticket = world.file_ticket("TCK-10002", customer.customer_id, "Wi-Fi drops every hour", "network")
    close = {"ticket_id": ticket.ticket_id, "resolution_code": "fixed"}
    outcome = world.call("close_ticket", close)
    refused(outcome, "resolution_comment_first")
    assert outcome.raised is None
    # the customer's name in the text: the analyzer must merge these across customers
    assert outcome.result == (
        f"Error: cannot close ticket {ticket.ticket_id} of {customer.name}: add a resolution comment first"
    )
    assert not world.call(
        "add_comment", {"ticket_id": ticket.ticket_id, "body": "Resolved: new driver"}
    ).failed
    closed = world.call("close_ticket", close)
    assert not closed.failed and closed.result == f"Ticket {ticket.ticket_id} closed (fixed)"
    refused(world.call("close_ticket", close), "ticket_closed")


def test_schedule_visit_wants_an_iso_weekday_and_returns_ok_false(world: HelpdeskWorld) -> None:
    customer = world.customers[3]
    asset = world.assets_of(customer.customer_id)[0]
    visit = {"customer_id": customer.customer_id, "asset_tag": asset.asset_tag, "slot": "morning"}
    us = world.call("schedule_visit", {**visit, "date": "12/07/2026"})
    refused(us, "date_form")
    assert us.result == {"ok": False, "error": "date must be YYYY-MM-DD (got '12/07/2026')"}
    saturday = world.call("schedule_visit", {**visit, "date": "2026-12-05"})
    refused(saturday, "weekdays_only")
    assert saturday.result == {
        "ok": False,
        "error": "cannot book a visit on Saturday 2026-12-05: technicians visit Monday to Friday only",
    }
    sunday = world.call("schedule_visit", {**visit, "date": "2026-12-06"})
    assert "on Sunday 2026-12-06" in str(sunday.error)
    booked = world.call("schedule_visit", {**visit, "date": "2026-12-07"})
    assert not booked.failed and booked.result["ok"] is True and len(world.visits) == 1


def test_transient_failures_come_only_when_asked_and_in_the_tools_own_way(world: HelpdeskWorld) -> None:
    name = world.customers[0].name
    timeout = world.call("search_customers", {"query": name}, transient=True)
    refused(timeout, "crm_timeout")
    assert isinstance(timeout.raised, UpstreamTimeout) and isinstance(timeout.raised, TimeoutError)
    assert str(timeout.raised) == "CRM search timed out after 5000 ms"
    found = world.call("search_customers", {"query": name})
    assert [c["name"] for c in found.result] == [name]
    limited = world.call("search_tickets", {"customer_id": world.customers[0].customer_id}, transient=True)
    refused(limited, "rate_limited")
    assert limited.result == "Error: rate limit exceeded (20 requests per 10 s); retry after 2 s"
    listed = world.call("search_tickets", {"customer_id": world.customers[0].customer_id})
    assert json.loads(listed.result) == {"tickets": []}
    # a tool without a transient failure ignores the request
    assert not world.call(
        "get_customer", {"customer_id": world.customers[0].customer_id}, transient=True
    ).failed


def test_every_tool_answers_a_careful_call(world: HelpdeskWorld) -> None:
    customer = world.customers[4]
    asset = world.assets_of(customer.customer_id)[0]
    ticket = world.file_ticket("TCK-10003", customer.customer_id, "password reset", "access")
    careful = {
        "search_customers": {"query": customer.name},
        "get_customer": {"customer_id": customer.customer_id},
        "list_assets": {"customer_id": customer.customer_id},
        "search_tickets": {"customer_id": customer.customer_id, "status": "open"},
        "get_ticket": {"ticket_id": ticket.ticket_id},
        "create_ticket": {"customer_id": customer.customer_id, "subject": "s", "category": "access",
                          "priority": "low"},
        "update_ticket": {"ticket_id": ticket.ticket_id, "priority": "urgent"},
        "add_comment": {"ticket_id": ticket.ticket_id, "body": "done"},
        "close_ticket": {"ticket_id": ticket.ticket_id, "resolution_code": "workaround"},
        "schedule_visit": {"customer_id": customer.customer_id, "asset_tag": asset.asset_tag, "date": "2026-12-08",
                           "slot": "afternoon"},
    }  # fmt: skip
    assert set(careful) == set(TOOLS) and len(TOOLS) == 10
    for tool, arguments in careful.items():
        outcome = world.call(tool, arguments)
        assert not outcome.failed and outcome.error is None, (tool, outcome)
    assert {t.style for t in TOOLS.values()} == {"raises", "error_object", "ok_false", "error_text"}
