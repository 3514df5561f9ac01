"""The staffing sample dataset: deterministic, schema-shaped, plausible."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from opslake.datasets import generate, generate_workers
from opslake.datasets.schema import PLACEMENTS_SCHEMA, WORKERS_SCHEMA, glue_columns, to_arrow
from opslake.datasets.staffing import ANCHOR_DATE, AVAILABILITY, CITIES, PLACEMENT_STATUS, ROLES


@pytest.fixture(scope="module")
def data() -> dict[str, list[dict]]:
    return generate()


def test_same_seed_same_rows_other_seed_other_rows(data: dict[str, list[dict]]) -> None:
    assert generate() == data
    other = generate(seed=7)
    assert other["workers"] != data["workers"]
    assert generate_workers(count=10) == generate_workers(count=10)


def test_sizes(data: dict[str, list[dict]]) -> None:
    assert len(data["workers"]) == 3000
    assert 3000 <= len(data["placements"]) <= 9000


def test_rows_fit_the_arrow_schemas(data: dict[str, list[dict]]) -> None:
    workers = to_arrow("workers", data["workers"])
    placements = to_arrow("placements", data["placements"])
    assert workers.schema == WORKERS_SCHEMA and placements.schema == PLACEMENTS_SCHEMA
    assert workers.num_rows == 3000


def test_glue_columns_use_athena_types() -> None:
    types = {c["Name"]: c["Type"] for c in glue_columns("workers") + glue_columns("placements")}
    assert types["skills"] == types["certifications"] == "array<string>"
    assert types["start_date"] == types["end_date"] == "date"
    assert types["rating"] == "double" and types["years_experience"] == "int"


def test_worker_fields_are_plausible(data: dict[str, list[dict]]) -> None:
    roles = {r.name: r for r in ROLES}
    cities = set(CITIES)
    ids = [w["worker_id"] for w in data["workers"]]
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"W\d{5}", i) for i in ids)
    for w in data["workers"]:
        role = roles[w["role"]]
        assert (w["city"], w["state"]) in cities
        assert 2 <= len(w["skills"]) <= 6 and set(w["skills"]) <= set(role.skills)
        assert set(w["certifications"]) <= set(role.certifications)
        assert all("|" not in s for s in w["skills"] + w["certifications"])
        assert w["availability"] in AVAILABILITY
        assert 1.0 <= w["rating"] <= 5.0
        assert role.pay[0] * 0.6 <= w["hourly_rate"] <= role.pay[1]


def test_distributions_are_spread(data: dict[str, list[dict]]) -> None:
    workers = data["workers"]
    roles = Counter(w["role"] for w in workers)
    assert set(roles) == {r.name for r in ROLES} and min(roles.values()) >= 100
    assert len({w["state"] for w in workers}) >= 20
    availability = Counter(w["availability"] for w in workers)
    assert all(availability[a] >= 300 for a in AVAILABILITY)
    ratings = [w["rating"] for w in workers]
    assert 3.4 <= sum(ratings) / len(ratings) <= 4.4


def test_placements_reference_workers_and_have_consistent_dates(data: dict[str, list[dict]]) -> None:
    workers = {w["worker_id"]: w for w in data["workers"]}
    ids = [p["placement_id"] for p in data["placements"]]
    assert len(set(ids)) == len(ids)
    active = Counter()
    for p in data["placements"]:
        worker = workers[p["worker_id"]]
        assert p["role"] == worker["role"]
        assert p["status"] in PLACEMENT_STATUS
        assert p["start_date"] <= ANCHOR_DATE
        if p["status"] == "active":
            assert p["end_date"] is None and worker["availability"] == "unavailable"
            active[p["worker_id"]] += 1
        else:
            assert p["start_date"] <= p["end_date"] <= ANCHOR_DATE
    assert active and max(active.values()) == 1
    statuses = Counter(p["status"] for p in data["placements"])
    assert statuses["completed"] > statuses["cancelled"] > 0
