"""The service desk's follow rules: a planted mistake is switched off only by a served entry that
carries its specific fix by name (the argument and a form that accepts the real value and refuses the
wrong one, the enum's values as the API spells them, the missing or extra argument, the precondition
or lookup tool, the rule's words), at the mistake's tool or by the task's class. Entries that name
only the tool, only the error, or say "check the input" fix nothing; so do entries for another task
class, another tool, or with a wrong form."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from opslake_local.simulator import SimAgent
from opslake_local.worlds.helpdesk import (
    MODES,
    TASK_CLASSES,
    TASK_MODES,
    HelpdeskPlan,
    HelpdeskWorld,
    fixes,
    follow_entries,
    forms,
    modes_fixed,
    plan_task,
)

pytestmark = pytest.mark.unit

WORLD = HelpdeskWorld(7)


def plan(task_class: str, **values: Any) -> HelpdeskPlan:
    """A plan of ``task_class`` that rolled every mistake (values as drawn unless told)."""
    agent = SimAgent("a", "k", dict.fromkeys(MODES, 1.0))
    base = plan_task(random.Random("follow"), agent, WORLD, "TCK-10001")
    return replace(base, task_class=task_class, **values)


def entry(action: str, endpoint: str | None, *, trigger: str = "t", **fields: Any) -> dict[str, Any]:
    return {"entry_id": "pb_x", "trigger": trigger, "action": action, "endpoint": endpoint, "confidence": 0.5,
            **fields}  # fmt: skip


OPEN, RESOLVE, REASSIGN, VISIT = (plan(c) for c in TASK_CLASSES)
GET, CREATE = "tool:get_customer", "tool:create_ticket"
CLOSE, UPDATE, SCHEDULE = "tool:close_ticket", "tool:update_ticket", "tool:schedule_visit"

# (entry, plan, the mistakes it switches off there): the contrasts' phrasings and a model's wording
FIX_TABLE = [
    # customer_id_form: customer_id and a form that takes CUS-482133 and refuses 482133
    (entry("Send customer_id of the form CUS- + 6 digits", GET, instead_of="6 digits"), OPEN, {"customer_id_form"}),
    (entry("Use customer_id values matching `CUS-[0-9]{6}`", GET), OPEN, {"customer_id_form"}),
    (entry("customer_id must match ^CUS-\\d{6}$", None, task_class="open_ticket"), OPEN, {"customer_id_form"}),
    (entry("Write customer_id as 'CUS-' followed by six digits", GET), OPEN, {"customer_id_form"}),
    (entry("Send customer ids like CUS-999999", GET, instead_of="customer_id like 999999"), OPEN,
     {"customer_id_form"}),
    (entry("customer_id of 6 digits", GET), OPEN, set()),  # the wrong form
    (entry("customer_id must match cus-[0-9]{6}", GET), OPEN, set()),  # the API's ids are upper case
    (entry("tool:get_customer refuses: 'invalid customer_id <str>'", GET), OPEN, set()),  # the error only
    (entry("Call tool:get_customer as other agents did", GET), OPEN, set()),
    (entry("Send customer_id of the form CUS- + 6 digits", CREATE), OPEN, set()),  # another tool
    (entry("Send customer_id of the form CUS- + 6 digits", GET, task_class="book_visit"), OPEN, set()),
    # priority_case: the values as the API spells them
    (entry("Send priority as one of low, normal, high, urgent", CREATE, instead_of="High"), OPEN,
     {"priority_case"}),
    (entry("tool:create_ticket refuses: 'validation failed: priority must be one of low, normal, high, urgent "
           "(got <str>)'", CREATE), OPEN, {"priority_case"}),
    (entry("Change priority from High to high", CREATE), OPEN, {"priority_case"}),  # a recovery
    (entry("priority values are lower case", None, task_class="open_ticket"), OPEN, {"priority_case"}),
    (entry("Use one of Low, Normal, High, Urgent for priority", CREATE), OPEN, set()),
    (entry("Send priority on tool:create_ticket", CREATE), OPEN, set()),
    # missing_category
    (entry("Send category on tool:create_ticket", CREATE), OPEN, {"missing_category"}),
    (entry("tool:create_ticket refuses: 'validation failed: category is required'", CREATE), OPEN,
     {"missing_category"}),
    (entry("Send all required arguments to tool:create_ticket", CREATE), OPEN, set()),
    # close_without_comment: the precondition tool, or the rule
    (entry("Call tool:add_comment before tool:close_ticket", CLOSE), RESOLVE, {"close_without_comment"}),
    (entry("Call add_comment before close_ticket", None, task_class="resolve_ticket"), RESOLVE,
     {"close_without_comment"}),
    (entry("tool:close_ticket refuses: 'cannot close ticket <id> of <name>: add a resolution comment first'",
           CLOSE), RESOLVE, {"close_without_comment"}),
    (entry("Call tool:get_ticket before tool:close_ticket", CLOSE), RESOLVE, set()),
    (entry("tool:close_ticket fails often: retry it", CLOSE), RESOLVE, set()),
    (entry("Call tool:add_comment before tool:close_ticket", "tool:add_comment"), RESOLVE, set()),
    # guessed_ticket_id: the lookup tool
    (entry("Call tool:search_tickets before tool:update_ticket", UPDATE), REASSIGN, {"guessed_ticket_id"}),
    (entry("Look the ticket up with search_tickets; never guess ticket ids", UPDATE), REASSIGN,
     {"guessed_ticket_id"}),
    (entry("tool:update_ticket refuses: 'ticket <id> not found'", UPDATE), REASSIGN, set()),
    (entry("Use ticket ids of the form TCK- + 5 digits", UPDATE), REASSIGN, set()),
    # assignee_argument: the argument to leave out, or the one to send
    (entry("Leave out assignee on tool:update_ticket", UPDATE), REASSIGN, {"assignee_argument"}),
    (entry("Send team", UPDATE, instead_of="assignee"), REASSIGN, {"assignee_argument"}),
    (entry("update_ticket does not take assignee", UPDATE), REASSIGN, {"assignee_argument"}),
    (entry("Send assignee on tool:update_ticket", UPDATE), REASSIGN, set()),
    (entry("tool:update_ticket refuses: 'update_ticket() got an unexpected keyword argument <str>'", UPDATE),
     REASSIGN, set()),
    # us_date_form: date and a form that takes 2026-12-07 and refuses 12/07/2026
    (entry("Send date as YYYY-MM-DD", SCHEDULE, instead_of="MM/DD/YYYY"), VISIT, {"us_date_form"}),
    (entry("date must match [0-9]{4}-[0-9]{2}-[0-9]{2}", SCHEDULE), VISIT, {"us_date_form"}),
    (entry("Write dates in ISO 8601", SCHEDULE), VISIT, {"us_date_form"}),
    (entry("tool:schedule_visit refuses: 'date must be YYYY-MM-DD (got <str>)'", SCHEDULE), VISIT,
     {"us_date_form"}),
    (entry("Send date like 9999-99-99", SCHEDULE, instead_of="99/99/9999"), VISIT, {"us_date_form"}),
    (entry("Send date like 99/99/9999", SCHEDULE), VISIT, set()),
    (entry("Use MM/DD/YYYY for date", SCHEDULE), VISIT, set()),
    (entry("Send the visit's date", SCHEDULE), VISIT, set()),
    # weekend_visit: the rule's words
    (entry("Book visits Monday to Friday only", SCHEDULE), VISIT, {"weekend_visit"}),
    (entry("No visits on weekends", None, task_class="book_visit"), VISIT, {"weekend_visit"}),
    (entry("tool:schedule_visit refuses: 'cannot book a visit on <word> <date>: technicians visit Monday to "
           "Friday only'", SCHEDULE), VISIT, {"weekend_visit"}),
    (entry("tool:schedule_visit refuses dates: check the date", SCHEDULE), VISIT, set()),
    (entry("cannot book a visit on Saturday", SCHEDULE), VISIT, set()),
    # the generic contrasts' canonical phrasings as they first came out of the demo's lake
    (entry("Send customer_id of the form CUS- + 6 digits (CUS-[0-9]{6})", GET, instead_of="customer_id like 999999"),
     OPEN, {"customer_id_form"}),
    (entry("Send priority as one of low, normal or urgent", CREATE, instead_of="priority like Urgent"), OPEN,
     {"priority_case"}),
    (entry("Send category in the tool:create_ticket arguments", CREATE,
           instead_of="arguments with only customer_id, subject and priority"), OPEN, {"missing_category"}),
    (entry("Leave assignee out of the tool:update_ticket arguments", UPDATE, instead_of="arguments with assignee"),
     REASSIGN, {"assignee_argument"}),
    (entry("Send date of the form {date} ([0-9]{4}-[0-9]{2}-[0-9]{2})", SCHEDULE, instead_of="date like 99/99/9999"),
     VISIT, {"us_date_form"}),
    # a successes entry showing the call's shape names its arguments (category), never a value's form
    (entry('Call tool:create_ticket shaped like {"customer_id": "{id}", "subject": "{subject}", "category"...',
           CREATE), OPEN, {"missing_category"}),
    (entry('Call tool:get_customer shaped like {"customer_id": "{id}"}', GET), OPEN, set()),
    (entry('Call tool:update_ticket shaped like {"ticket_id": "{id}", "team": "{team}"}', UPDATE), REASSIGN, set()),
    (entry('Call tool:schedule_visit shaped like {"customer_id": "{id}", "asset_tag": "{id}", "date": "{date}", '
           '"slot": "{slot}"}', SCHEDULE), VISIT, set()),
    (entry('Call tool:close_ticket shaped like {"ticket_id": "{id}", "resolution_code": "{resolution_code}"}',
           CLOSE), RESOLVE, set()),
    # one entry, two fixes at its tool
    (entry("Send category, and priority as one of low, normal, high, urgent", CREATE), OPEN,
     {"missing_category", "priority_case"}),
]  # fmt: skip

GENERIC = [
    "Read the error and change the input; do not repeat an identical call",
    "Check the input of the tool",
    "Call the tool as other agents did",
    "Retry after a timeout",
]


@pytest.mark.parametrize(("served", "task", "fixed"), FIX_TABLE)
def test_an_entry_fixes_a_mistake_only_when_it_carries_its_fix(
    served: dict[str, Any], task: HelpdeskPlan, fixed: set[str]
) -> None:
    assert fixes(served, task) == fixed


@pytest.mark.parametrize("action", GENERIC)
def test_generic_entries_fix_nothing_at_any_tool_of_any_task(action: str) -> None:
    for task in (OPEN, RESOLVE, REASSIGN, VISIT):
        for tool in task.tools:
            assert fixes(entry(action, f"tool:{tool}"), task) == set()
        assert fixes(entry(action, None, task_class=task.task_class), task) == set()


def test_an_entry_applies_only_to_its_task_class_and_the_tools_of_the_task() -> None:
    fix = "Call tool:add_comment before tool:close_ticket"
    assert fixes(entry(fix, CLOSE, task_class="resolve_ticket"), RESOLVE) == {"close_without_comment"}
    assert fixes(entry(fix, CLOSE, task_class="open_ticket"), RESOLVE) == set()
    assert fixes(entry(fix, None), RESOLVE) == set()  # neither an endpoint nor a task class
    assert fixes(entry(fix, CLOSE), OPEN) == set()  # open_ticket never calls close_ticket
    assert fixes(entry(fix, "tool:some_other_tool"), RESOLVE) == set()


def test_confidence_below_the_minimum_fixes_nothing() -> None:
    served = {**entry("Leave out assignee on tool:update_ticket", UPDATE), "confidence": 0.2}
    assert fixes(served, REASSIGN, min_confidence=0.5) == set()
    assert fixes(served, REASSIGN, min_confidence=0.1) == {"assignee_argument"}


def test_a_form_is_judged_against_this_tasks_values() -> None:
    """The form must take the task's own valid value and refuse its wrong one."""
    served = entry("Send customer_id of the form CUS- + 6 digits", GET)
    assert fixes(served, OPEN) == {"customer_id_form"}
    # a world whose ids had 7 digits would not be fixed by a 6-digit form
    seven = replace(OPEN, customer_id="CUS-1234567")
    assert fixes(served, seven) == set()


def test_forms_reads_regexes_digit_counts_placeholders_and_shapes() -> None:
    found = [p.pattern for p in forms("CUS- + 6 digits, `^W[0-9]{5}$`, YYYY-MM-DD, 9999-99-99 or AST-#####")]
    assert any(p.endswith(r"\d{6}") and p.startswith("CUS") for p in found)
    assert "W[0-9]{5}" in found
    assert r"\d{4}\-\d{2}\-\d{2}" in found
    assert any(p.startswith("AST") and p.endswith(r"\d{5}") for p in found)
    assert forms("[unclosed") == []


def test_follow_entries_keeps_the_served_order_and_skips_what_fixes_nothing() -> None:
    served: list[object] = [
        {**entry("Call tool:search_tickets before tool:update_ticket", UPDATE), "entry_id": "pb_a"},
        "not an entry",
        {**entry("Check the input of the tool", UPDATE), "entry_id": "pb_b"},
        {**entry("Leave out assignee", UPDATE), "entry_id": "pb_c"},
    ]
    assert follow_entries(served, REASSIGN) == [
        ("pb_a", {"guessed_ticket_id"}),
        ("pb_c", {"assignee_argument"}),
    ]


def test_every_mistake_has_a_fixing_entry_in_the_table() -> None:
    fixed = set().union(*(modes for _, _, modes in FIX_TABLE))
    assert fixed == set(MODES)
    assert {mode for modes in TASK_MODES.values() for mode in modes} == set(MODES)


def test_modes_fixed_judges_an_entry_outside_a_task() -> None:
    assert modes_fixed(entry("Call tool:add_comment before tool:close_ticket", CLOSE)) == {
        "close_without_comment"
    }
    assert modes_fixed(entry("Write dates in ISO 8601", SCHEDULE)) == {"us_date_form"}
    assert modes_fixed(entry("Check the input of the tool", SCHEDULE)) == set()
