"""The staffing sample dataset: workers and their placements, generated from a seed.

Pure and deterministic (no I/O, no clock, no pyarrow): the same seed always gives the same rows,
so tests, the local stack and a deployed stack all hold identical data. Dates are relative to a
fixed anchor, not today. Skills and certifications are lists of lowercase strings drawn from a
vocabulary per role (``array<string>`` in Glue, a list column in Parquet and DuckDB); they never
contain ``|``, which the gateway tools use to join them in SQL.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

DEFAULT_SEED = 42
DEFAULT_WORKERS = 3000
#: Placements start within the 2 years before this date; those still running are "active".
ANCHOR_DATE = date(2026, 11, 1)

WORKERS = "workers"
PLACEMENTS = "placements"
TABLES = (WORKERS, PLACEMENTS)

DESCRIPTIONS = {
    WORKERS: "Sample staffing workers: one row per worker with role, location, skills, "
    "certifications, availability, rating and hourly rate",
    PLACEMENTS: "Sample staffing placements: one row per assignment of a worker to a client site, "
    "with dates and status",
}

AVAILABILITY = ("immediate", "1_week", "2_weeks", "unavailable")
_AVAILABILITY_WEIGHTS = (0.35, 0.2, 0.25, 0.2)
PLACEMENT_STATUS = ("active", "completed", "cancelled")


@dataclass(frozen=True)
class Role:
    """A trade: its skills and certifications vocabularies and its pay band (USD per hour)."""

    name: str
    skills: tuple[str, ...]
    certifications: tuple[str, ...]
    pay: tuple[float, float]
    weight: float


ROLES: tuple[Role, ...] = (
    Role(
        "welder",
        ("mig welding", "tig welding", "stick welding", "flux core welding", "pipe welding",
         "structural welding", "blueprint reading", "metal fabrication", "plasma cutting",
         "aluminum welding", "stainless steel welding", "grinding"),
        ("aws d1.1", "aws d17.1", "osha 10", "asme section ix"),
        (20.0, 38.0), 1.0,
    ),
    Role(
        "electrician",
        ("residential wiring", "commercial wiring", "industrial wiring", "conduit bending",
         "troubleshooting", "plc programming", "motor controls", "panel installation",
         "blueprint reading", "low voltage", "solar installation", "nec code"),
        ("journeyman license", "master electrician license", "osha 30", "nfpa 70e"),
        (24.0, 48.0), 0.9,
    ),
    Role(
        "forklift operator",
        ("sit-down forklift", "stand-up forklift", "reach truck", "order picker", "pallet jack",
         "inventory control", "loading and unloading", "rf scanning", "cycle counting",
         "shipping and receiving"),
        ("osha forklift certification", "osha 10"),
        (16.0, 24.0), 1.2,
    ),
    Role(
        "cnc machinist",
        ("cnc milling", "cnc turning", "g-code programming", "mastercam", "blueprint reading",
         "gd&t", "precision measurement", "cmm inspection", "fanuc controls", "haas controls",
         "setup and changeover", "5-axis machining"),
        ("nims machining level i", "nims cnc milling", "osha 10"),
        (22.0, 40.0), 0.8,
    ),
    Role(
        "warehouse associate",
        ("picking and packing", "shipping and receiving", "rf scanning", "inventory control",
         "pallet jack", "cycle counting", "loading and unloading", "quality inspection",
         "labeling", "wms software"),
        ("osha 10", "osha forklift certification"),
        (15.0, 21.0), 1.5,
    ),
    Role(
        "hvac technician",
        ("hvac installation", "refrigeration", "troubleshooting", "ductwork", "heat pumps",
         "boilers", "preventive maintenance", "brazing", "building automation",
         "commercial hvac", "residential hvac"),
        ("epa 608 universal", "epa 608 type ii", "nate certification", "osha 10"),
        (23.0, 42.0), 0.8,
    ),
    Role(
        "assembler",
        ("electrical assembly", "mechanical assembly", "soldering", "hand tools", "power tools",
         "blueprint reading", "quality inspection", "torque tools", "wire harness assembly",
         "lean manufacturing"),
        ("ipc j-std-001", "ipc-a-610", "osha 10"),
        (16.0, 24.0), 1.1,
    ),
    Role(
        "maintenance technician",
        ("preventive maintenance", "troubleshooting", "hydraulics", "pneumatics", "plc programming",
         "motor controls", "welding", "conveyor systems", "electrical maintenance",
         "mechanical maintenance", "lockout tagout"),
        ("osha 30", "certified maintenance technician", "nfpa 70e"),
        (24.0, 40.0), 0.9,
    ),
    Role(
        "cdl driver",
        ("class a driving", "hazmat", "tanker", "flatbed", "doubles and triples", "eld logging",
         "pre-trip inspection", "route planning", "local delivery", "over the road"),
        ("cdl class a", "cdl class b", "hazmat endorsement", "twic card"),
        (22.0, 36.0), 0.7,
    ),
    Role(
        "machine operator",
        ("injection molding", "press operation", "cnc operation", "setup and changeover",
         "quality inspection", "precision measurement", "lean manufacturing", "blueprint reading",
         "extrusion", "packaging lines"),
        ("osha 10", "six sigma yellow belt"),
        (16.0, 26.0), 1.0,
    ),
)  # fmt: skip

#: US cities with their states (postal codes), weighted towards industrial metros.
CITIES: tuple[tuple[str, str], ...] = (
    ("Houston", "TX"), ("Dallas", "TX"), ("Austin", "TX"), ("San Antonio", "TX"), ("Fort Worth", "TX"),
    ("Phoenix", "AZ"), ("Tucson", "AZ"), ("Atlanta", "GA"), ("Savannah", "GA"), ("Chicago", "IL"),
    ("Joliet", "IL"), ("Detroit", "MI"), ("Grand Rapids", "MI"), ("Columbus", "OH"), ("Cleveland", "OH"),
    ("Cincinnati", "OH"), ("Indianapolis", "IN"), ("Fort Wayne", "IN"), ("Charlotte", "NC"),
    ("Raleigh", "NC"), ("Greenville", "SC"), ("Nashville", "TN"), ("Memphis", "TN"), ("Louisville", "KY"),
    ("Birmingham", "AL"), ("Pittsburgh", "PA"), ("Philadelphia", "PA"), ("Newark", "NJ"),
    ("Los Angeles", "CA"), ("Fresno", "CA"), ("Riverside", "CA"), ("Sacramento", "CA"),
    ("Denver", "CO"), ("Salt Lake City", "UT"), ("Las Vegas", "NV"), ("Reno", "NV"), ("Seattle", "WA"),
    ("Tacoma", "WA"), ("Portland", "OR"), ("Kansas City", "MO"), ("St. Louis", "MO"), ("Omaha", "NE"),
    ("Milwaukee", "WI"), ("Minneapolis", "MN"), ("Tulsa", "OK"), ("Oklahoma City", "OK"),
    ("Baton Rouge", "LA"), ("Jacksonville", "FL"), ("Tampa", "FL"), ("Orlando", "FL"),
)  # fmt: skip

_FIRST_NAMES = (
    "James", "Maria", "Robert", "Jennifer", "Michael", "Linda", "David", "Patricia", "Jose", "Elizabeth",
    "Carlos", "Susan", "Daniel", "Jessica", "Luis", "Sarah", "Anthony", "Karen", "Kevin", "Nancy",
    "Juan", "Lisa", "Brian", "Angela", "Jorge", "Ashley", "Marcus", "Tamika", "Tyrone", "Mei",
    "Wei", "Priya", "Raj", "Olga", "Dmitri", "Fatima", "Ahmed", "Thanh", "Minh", "Keisha",
    "Andre", "Rosa", "Miguel", "Ana", "Terrell", "Heather", "Cody", "Amber", "Dustin", "Brandy",
)  # fmt: skip
_LAST_NAMES = (
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez",
    "Martinez", "Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson", "Thomas", "Taylor", "Moore",
    "Jackson", "Martin", "Lee", "Perez", "Thompson", "White", "Harris", "Sanchez", "Clark", "Ramirez",
    "Lewis", "Robinson", "Walker", "Young", "Allen", "King", "Wright", "Scott", "Torres", "Nguyen",
    "Hill", "Flores", "Green", "Adams", "Nelson", "Baker", "Hall", "Rivera", "Campbell", "Mitchell",
    "Patel", "Kim",
)  # fmt: skip
_CLIENTS = (
    "Lone Star Fabrication", "Gulf Coast Refining", "Summit Logistics", "Apex Automotive",
    "Midwest Metal Works", "Pioneer Aerospace", "Keystone Foods", "Riverbend Distribution",
    "Ironclad Construction", "Great Lakes Plastics", "Sunbelt Energy", "Harbor Freight Terminals",
    "Cascade Electronics", "Redwood Packaging", "Blue Ridge Furniture", "Granite State Machining",
    "Prairie Ag Equipment", "Desert Sun Solar", "Magnolia Shipbuilding", "Evergreen Cold Storage",
)  # fmt: skip


def worker_id(number: int) -> str:
    """The id of the ``number``-th worker: ``W`` and five digits (``W00042``)."""
    return f"W{number:05d}"


def _sample(rng: random.Random, vocabulary: tuple[str, ...], low: int, high: int) -> list[str]:
    count = min(len(vocabulary), rng.randint(low, high))
    picked = rng.sample(vocabulary, count)
    return sorted(picked)


def generate_workers(seed: int = DEFAULT_SEED, count: int = DEFAULT_WORKERS) -> list[dict[str, Any]]:
    """``count`` workers, ids ``W00001``…; each row has every column of the ``workers`` table."""
    if not 1 <= count <= 99_999:
        raise ValueError(f"count must be from 1 to 99999, got {count}")
    rng = random.Random(f"workers:{seed}")
    roles = rng.choices(ROLES, weights=[r.weight for r in ROLES], k=count)
    rows = []
    for number, role in enumerate(roles, start=1):
        city, state = rng.choice(CITIES)
        experience = min(40, int(rng.expovariate(1 / 7)))
        low, high = role.pay
        rate = low + (high - low) * min(1.0, experience / 20) * rng.uniform(0.6, 1.0)
        rating = min(5.0, max(1.0, rng.gauss(3.8, 0.6) + min(experience, 15) * 0.02))
        rows.append(
            {
                "worker_id": worker_id(number),
                "name": f"{rng.choice(_FIRST_NAMES)} {rng.choice(_LAST_NAMES)}",
                "role": role.name,
                "city": city,
                "state": state,
                "skills": _sample(rng, role.skills, 2, 6),
                "certifications": _sample(rng, role.certifications, 0, 2),
                "availability": rng.choices(AVAILABILITY, weights=_AVAILABILITY_WEIGHTS)[0],
                "years_experience": experience,
                "rating": round(rating, 1),
                "hourly_rate": round(rate, 2),
            }
        )
    return rows


def generate_placements(workers: list[dict[str, Any]], seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """Zero to four past or current placements per worker, ids ``P000001``…, in the worker's trade
    and mostly in their city; at most one is active, and only for a worker marked unavailable."""
    rng = random.Random(f"placements:{seed}")
    rows: list[dict[str, Any]] = []
    for worker in workers:
        count = rng.choices((0, 1, 2, 3, 4), weights=(0.2, 0.3, 0.25, 0.15, 0.1))[0]
        start = ANCHOR_DATE - timedelta(days=rng.randint(60, 730))
        for index in range(count):
            if rng.random() < 0.85:
                city, state = worker["city"], worker["state"]
            else:
                city, state = rng.choice(CITIES)
            weeks = rng.randint(2, 26)
            end = start + timedelta(weeks=weeks)
            last = index == count - 1
            if last and worker["availability"] == "unavailable" and end > ANCHOR_DATE - timedelta(days=30):
                status, end_date = "active", None
            elif rng.random() < 0.08:
                status, end_date = "cancelled", min(start + timedelta(days=rng.randint(1, 10)), ANCHOR_DATE)
            else:
                status, end_date = "completed", min(end, ANCHOR_DATE)
            rows.append(
                {
                    "placement_id": f"P{len(rows) + 1:06d}",
                    "worker_id": worker["worker_id"],
                    "client": rng.choice(_CLIENTS),
                    "role": worker["role"],
                    "city": city,
                    "state": state,
                    "start_date": start,
                    "end_date": end_date,
                    "status": status,
                }
            )
            start = (end_date or end) + timedelta(days=rng.randint(3, 60))
            if start >= ANCHOR_DATE:
                break
    return rows


def generate(seed: int = DEFAULT_SEED, workers: int = DEFAULT_WORKERS) -> dict[str, list[dict[str, Any]]]:
    """Both tables: ``{"workers": [...], "placements": [...]}``."""
    worker_rows = generate_workers(seed, workers)
    return {WORKERS: worker_rows, PLACEMENTS: generate_placements(worker_rows, seed)}
