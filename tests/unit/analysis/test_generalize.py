"""Generalization (issue 16, issue 24): an entry's text loses the values of one instance — ids,
dates, a request's literals, and the word values the tool catalog saw an argument take among many
(cities, states, roles, clients in the staffing world) — and says what it replaced; names of the
catalog, id forms and shapes stay. No list in code: the words come from the vocabulary."""

from __future__ import annotations

import pytest

from opslake.analysis.catalog.known import vocabulary_of
from opslake.analysis.playbooks import GENERALIZED_FORMS, Replaced
from opslake.analysis.playbooks import generalize as _generalize
from opslake.analysis.playbooks import instance_values as _instance_values
from tests.vocabulary import staffing_vocabulary

VOCABULARY = staffing_vocabulary()


def generalize(text: str) -> tuple[str, list[Replaced]]:
    return _generalize(text, VOCABULARY.instances, VOCABULARY.fields)


def instance_values(text: str) -> list[Replaced]:
    return _instance_values(text, VOCABULARY.instances, VOCABULARY.fields)


CASES = [
    ("Worker 'W90519' does not exist: use worker ids returned by POST /match or /sql",
     "Worker an id does not exist: use worker ids returned by POST /match or /sql", ["id"]),
    ("retry W00042 later", "retry an id later", ["id"]),
    ("GET /worker/W00042 then GET /worker/ord-1234", "GET /worker/{id} then GET /worker/{id}", ["id", "id"]),
    ("order 'ord-1234' is gone", "order an id is gone", ["id"]),
    ("staff job: assembler in Tucson, AZ", "staff job: {role} in {city}, AZ", ["instance", "instance"]),
    ("welders in Salt Lake City, 'UT'", "{role} in {city}, '{state}'", ["instance", "instance", "instance"]),
    # a client is a value no tool's argument takes in the staffing traffic: the catalog has no word of it
    ("for Lone Star Fabrication", "for Lone Star Fabrication", []),
    ("jobs in Phoenix", "jobs in {city}", ["instance"]),
    ('Call POST /match shaped like {"role":"nurse","count":{num}}',
     'Call POST /match shaped like {"role":"{role}","count":{num}}', ["literal"]),
    ('{"need": "night shift", "notes": "x"}', '{"need": "{need}", "notes": "{str}"}', ["literal", "literal"]),
    ("SELECT * FROM workers WHERE city = 'Tucson' AND state IN ('AZ', 'TX') AND name LIKE '%bob%'",
     "SELECT * FROM workers WHERE city = '{city}' AND state IN ('{state}', '{state}') AND name LIKE '{str}'",
     ["instance", "instance", "instance", "literal"]),
    ("role in ('x','y')", "role in ('{str}','{str}')", ["literal"]),
    ("on 2026-11-01T10:00:00Z for 123e4567-e89b-12d3-a456-426614174000 with count \"42\"",
     "on {date} for {uuid} with count \"{num}\"", ["uuid", "date", "number"]),
]  # fmt: skip

UNCHANGED = [
    "Use the column hourly_rate of workers",
    "Send role and city or state in the POST /match body",
    "Use worker ids of the form W + five digits (^W[0-9]{5}$)",
    "Send priority as one of high, low or normal",  # an enum's values are constants, not instances
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
        ("Ｗ９０５１９", "id"),  # full-width: its compatibility form is W90519
        ("Ԝ90519 was asked for", "id"),  # a Cyrillic look-alike W: seen through the skeleton
        ("jobs in Tucsоn", "instance"),  # a Cyrillic о
        ("JOBS IN TUCSON, AZ", "instance"),
    ],
)
def test_instance_values_see_through_look_alikes(text: str, kind: str) -> None:
    assert [r.kind for r in instance_values(text)][:1] == [kind]


def test_the_id_phrase_is_what_the_gate_gives_no_weight() -> None:
    out, _ = generalize("worker W12345")
    assert out == "worker an id"
    assert "an id" in GENERALIZED_FORMS


def test_instances_are_the_catalog_s_not_a_list_in_code() -> None:
    """Without a vocabulary no word is an instance; a tool whose argument takes many word values
    makes them instances ({argument}), one that takes a few (an enum) keeps them as words."""
    assert _generalize("jobs in Phoenix") == ("jobs in Phoenix", [])
    from opslake.models.catalog import ArgumentStat, ShapeStat, ToolCatalog, ToolStat

    witnesses = ["k1", "k2"]
    many = [ShapeStat(shape=f"Product{c}", calls=1, witnesses=witnesses) for c in "ABCDEFGHIJKL"]
    few = [ShapeStat(shape=p, calls=5, witnesses=witnesses) for p in ("high", "low", "normal")]
    tool = ToolStat(
        endpoint="tool:order", calls=20, witnesses=witnesses,
        arguments=[
            ArgumentStat(name="product", calls=12, witnesses=witnesses, shapes=many, distinct_shapes=12),
            ArgumentStat(name="priority", calls=15, witnesses=witnesses, shapes=few, distinct_shapes=3),
        ],
    )  # fmt: skip
    vocabulary = vocabulary_of(ToolCatalog(tools=[tool]))
    out, replaced = _generalize(
        "no stock of ProductC, priority high", vocabulary.instances, vocabulary.fields
    )
    assert out == "no stock of {product}, priority high" and [r.value for r in replaced] == ["ProductC"]
    # a value inside a name joined by - . or : is part of the name (a tool, a file), not an instance
    for name in ("tool:order-productc-v2", "productc.csv", "ProductC:9", "tool:productc"):
        assert _generalize(f"call {name} first", vocabulary.instances, vocabulary.fields)[1] == [], name
    assert _generalize("out of ProductC.", vocabulary.instances, vocabulary.fields)[0] == "out of {product}."


def test_generalize_is_bounded_on_long_hostile_text() -> None:
    text = "W" + "1" * 5000 + " 'a" * 3000 + " Tucson," * 1000
    out, replaced = generalize(text)
    assert "{city}" in out and replaced


def test_one_key_cannot_make_words_instances() -> None:
    """Instances are values enough reporters sent to a known argument: one key's tool (or one
    key's extra values of a real argument) adds none, so it cannot get entries refused as tied to
    an instance ("send", "the") nor turn an enum's constants into instances."""
    from opslake.models.catalog import ArgumentStat, ShapeStat, ToolCatalog, ToolStat

    two, one = ["k1", "k2"], ["k3"]
    words = ["send", "the", "arguments", "first", "form", "digits", "ticket", "create", "body"]
    evil = ToolStat(
        endpoint="tool:evil", calls=50, witnesses=one,
        arguments=[ArgumentStat(name="note", calls=50, witnesses=one, distinct_shapes=len(words),
                                shapes=[ShapeStat(shape=w, calls=5, witnesses=one) for w in words])],
    )  # fmt: skip
    priority = [ShapeStat(shape=p, calls=9, witnesses=two) for p in ("high", "low", "urgent")]
    priority += [ShapeStat(shape=w, calls=1, witnesses=one) for w in words]  # one key's extra values
    real = ToolStat(
        endpoint="tool:ticket", calls=90, witnesses=two,
        arguments=[ArgumentStat(name="priority", calls=90, witnesses=two, shapes=priority, distinct_shapes=12)],
    )  # fmt: skip
    vocabulary = vocabulary_of(ToolCatalog(tools=[evil, real]))
    assert vocabulary.instances == {}
    assert vocabulary.is_enum(vocabulary.arguments("tool:ticket")[0])
    text = "Send priority as one of high, low or urgent in the tool:ticket arguments first"
    assert _generalize(text, vocabulary.instances, vocabulary.fields) == (text, [])
