"""Generalization (issue 16): an entry's text loses the values of one instance — worker ids and
other ids, cities and states, roles, clients, dates, a request's literals — and says what it
replaced; names of the catalog, id forms and shapes stay."""

from __future__ import annotations

import pytest

from opslake.analysis.playbooks import GENERALIZED_FORMS, Replaced, generalize, instance_values

CASES = [
    ("Worker 'W90519' does not exist: use worker ids returned by POST /match or /sql",
     "A worker id (W + five digits) does not exist: use worker ids returned by POST /match or /sql",
     ["worker_id"]),
    ("retry W00042 later", "retry a worker id (W + five digits) later", ["worker_id"]),
    ("GET /worker/W00042 then GET /worker/ord-1234", "GET /worker/{id} then GET /worker/{id}", ["worker_id", "id"]),
    ("order 'ord-1234' is gone", "order an id is gone", ["id"]),
    ("staff job: assembler in Tucson, AZ", "staff job: {role} in {city}, {state}", ["city", "role"]),
    ("welders in Salt Lake City, UT for Lone Star Fabrication", "{role} in {city}, {state} for {client}",
     ["client", "city", "role"]),
    ("jobs in Phoenix", "jobs in {city}", ["city"]),
    ('Call POST /match shaped like {"role":"nurse","count":{num}}',
     'Call POST /match shaped like {"role":"{role}","count":{num}}', ["literal"]),
    ('{"need": "night shift", "notes": "x"}', '{"need": "{need}", "notes": "{str}"}', ["literal", "literal"]),
    ("SELECT * FROM workers WHERE city = 'Tucson' AND state IN ('AZ', 'TX') AND name LIKE '%bob%'",
     "SELECT * FROM workers WHERE city = '{city}' AND state IN ('{state}', '{state}') AND name LIKE '{str}'",
     ["city", "state", "state", "literal"]),
    ("role in ('x','y')", "role in ('{str}','{str}')", ["literal"]),
    ("on 2026-11-01T10:00:00Z for 123e4567-e89b-12d3-a456-426614174000 with count \"42\"",
     "on {date} for {uuid} with count \"{num}\"", ["uuid", "date", "number"]),
]  # fmt: skip

UNCHANGED = [
    "Use the column hourly_rate of workers",
    "Send role and city or state in the POST /match body",
    "Use worker ids of the form W + five digits (^W[0-9]{5}$)",
    "ids like w-999 or 9999",  # shapes written by the contrast rules, not instances
    "Take worker ids from a POST /match or /sql answer; never guess them",
    "Aggregate in SQL (count(*), avg()) instead of listing rows: /sql cuts answers at its row limit",
    "Keep model prompts under 8000 input tokens",
    "Columns 'salary', 'pay_rate' do not exist: call GET /tables/{name}",  # wrong names, seen from many
    "Queries on /sql are too broad: add WHERE filters (on ops, the dt/hour partitions)",
    "Hash it with sha256, dates as iso8601",
    "the status is 'ok' or 'done'",  # lower case: no state code
    "GET /v1/traces and GET /profile/{agent_id}",
]


@pytest.mark.parametrize(("text", "expected", "kinds"), CASES)
def test_generalize_replaces_instance_values(text: str, expected: str, kinds: list[str]) -> None:
    out, replaced = generalize(text)
    assert out == expected
    assert sorted(r.kind for r in replaced) == sorted(kinds)
    assert all(isinstance(r, Replaced) and r.value in text and r.placeholder in out for r in replaced)
    assert generalize(out) == (out, [])  # idempotent: what it wrote names no instance
    assert instance_values(out) == []


@pytest.mark.parametrize("text", UNCHANGED)
def test_generalize_keeps_names_forms_and_shapes(text: str) -> None:
    assert generalize(text) == (text, [])
    assert instance_values(text) == []


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Ｗ９０５１９", "worker_id"),  # full-width: its compatibility form is W90519
        ("Ԝ90519 was asked for", "id"),  # a Cyrillic look-alike W: seen through the skeleton
        ("jobs in Tucsоn", "city"),  # a Cyrillic о
        ("JOBS IN TUCSON, AZ", "city"),
    ],
)
def test_instance_values_see_through_look_alikes(text: str, kind: str) -> None:
    assert [r.kind for r in instance_values(text)][:1] == [kind]


def test_the_worker_id_phrase_is_what_the_brief_and_the_gate_agree_on() -> None:
    out, _ = generalize("worker W12345")
    assert out == "a worker id (W + five digits)"
    assert "a worker id (W + five digits)" in GENERALIZED_FORMS and "{city}" in GENERALIZED_FORMS


def test_generalize_is_bounded_on_long_hostile_text() -> None:
    text = "W" + "1" * 5000 + " 'a" * 3000 + " Tucson," * 1000
    out, replaced = generalize(text)
    assert "{city}" in out and replaced
