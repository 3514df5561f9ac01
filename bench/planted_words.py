"""Planted failures whose error texts name words that vary: cities, products, colours, roles, user
and service names, regions, weekdays (besides the usual ids and numbers). The shape of issue 24's
hidden scenario (12 modes; masking alone made 47 signatures of them): masking cannot tell "Lyon"
from "Paris", so each mode splits into one signature per word it names, unless the analyzer merges
templates that differ only in such words.

Twelve modes. Some share an endpoint and error type on purpose, so that merging must keep them
apart: ``sql_unknown_column`` and ``sql_unknown_table`` differ in one keyword (``column``/``table``)
followed by a name, ``deploy_health`` and ``deploy_rollback`` and ``stock_out`` and
``warehouse_closed`` in their wording. Variables have small vocabularies (two to eight values), the
way one fleet's failures name a few cities or services, and some co-vary (colour × product × city).
``shift_conflict`` names a role that may be two words (``forklift operator``): a different token
count, which merging by position does not join (a known limit, reported rather than hidden).

    from planted_words import MODES
    from planted import generate
    data = generate(n_ops=100_000, failure_rate=0.05, catalog=MODES, seed=7)
"""

from __future__ import annotations

import random
import uuid

from planted import Mode

R = random.Random

CITIES = ("Lyon", "Paris", "Nice")
COLOURS = ("blue", "black")
PRODUCTS = ("sneakers", "boots")
ROLES = ("welder", "electrician", "plumber")
BOOKED_ROLES = ("welder", "forklift operator")
USERS = ("alice", "bob", "carol", "dave")
SERVICES = ("checkout", "search", "billing")
REPORTS = ("billing", "payroll")
REGIONS = ("Frankfurt", "Dublin")
MODELS = ("sonnet", "haiku", "opus")
COLUMNS = ("salry", "ratng", "skillz")
TABLES = ("workerz", "jobz", "staff")
WEEKDAYS = ("Monday", "Friday")


def _sku(rng: R) -> str:
    return f"SKU-{rng.randrange(10000, 99999)}"


def _uuid(rng: R) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _date(rng: R) -> str:
    return f"2025-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"


MODES: tuple[Mode, ...] = (
    Mode(
        "rate_limited",
        "tool:http_post",
        "http_429",
        lambda r: (
            f"429 Too Many Requests: rate limit exceeded for key {r.getrandbits(48):012x}; "
            f"retry after {r.randrange(1, 90)}s"
        ),
        lambda r: f'{{"url": "https://partner.example.com/v2/orders", "items": {r.randrange(1, 50)}}}',
    ),
    Mode(
        "deploy_rollback",
        "tool:deploy",
        "DeployFailed",
        lambda r: (
            f"deployment {_uuid(r)} was rolled back: image tag v{r.randrange(1, 40)} is missing from the registry"
        ),
        lambda r: f'{{"version": "v{r.randrange(1, 40)}"}}',
    ),
    Mode(
        "sql_unknown_column",
        "/sql",
        "sql_error",
        lambda r: f"column {r.choice(COLUMNS)} does not exist (line {r.randrange(1, 9)})",
        lambda r: f'{{"sql": "SELECT {r.choice(COLUMNS)} FROM workers LIMIT {r.randrange(1, 500)}"}}',
    ),
    Mode(
        "stock_out",
        "tool:reserve_stock",
        "OutOfStock",
        lambda r: (
            f"no stock of {r.choice(COLOURS)} {r.choice(PRODUCTS)} in {r.choice(CITIES)} "
            f"(sku {_sku(r)}, requested {r.randrange(1, 40)})"
        ),
        lambda r: f'{{"sku": "{_sku(r)}", "count": {r.randrange(1, 40)}}}',
    ),
    Mode(
        "mailbox_full",
        "tool:send_email",
        "MailboxFull",
        lambda r: (
            f"mailbox user{r.randrange(1, 999)}@example.com is full ({r.randrange(1, 900)} MB over quota)"
        ),
        lambda r: f'{{"to": "user{r.randrange(1, 999)}@example.com"}}',
    ),
    Mode(
        "no_role_available",
        "/match",
        "not_found",
        lambda r: f"no {r.choice(ROLES)} available in {r.choice(CITIES)} for {_date(r)}",
        lambda r: f'{{"role": "{r.choice(ROLES)}", "city": "{r.choice(CITIES)}"}}',
    ),
    Mode(
        "sql_unknown_table",
        "/sql",
        "sql_error",
        lambda r: f"table {r.choice(TABLES)} does not exist (line {r.randrange(1, 9)})",
        lambda r: f'{{"sql": "SELECT * FROM {r.choice(TABLES)} LIMIT {r.randrange(1, 500)}"}}',
    ),
    Mode(
        "report_forbidden",
        "tool:http_get",
        "http_403",
        lambda r: f"user {r.choice(USERS)} may not read these reports (request {_uuid(r)})",
        lambda r: f'{{"url": "https://reports.example.com/{r.choice(REPORTS)}"}}',
    ),
    Mode(
        "warehouse_closed",
        "tool:reserve_stock",
        "OutOfStock",
        lambda r: f"the {r.choice(CITIES)} warehouse is closed for inventory until {_date(r)}",
        lambda r: f'{{"sku": "{_sku(r)}", "count": {r.randrange(1, 40)}}}',
    ),
    Mode(
        "deploy_health",
        "tool:deploy",
        "DeployFailed",
        lambda r: (
            f"service {r.choice(SERVICES)} failed its health check in {r.choice(REGIONS)} after "
            f"{r.randrange(2, 9)} attempts"
        ),
        lambda r: f'{{"service": "{r.choice(SERVICES)}", "version": "v{r.randrange(1, 40)}"}}',
    ),
    Mode(
        "model_unavailable",
        "runtime:llm",
        "model_unavailable",
        lambda r: f"model {r.choice(MODELS)} is not available in this region right now",
        lambda r: f"turn {r.randrange(1, 200)}",
    ),
    Mode(
        "shift_conflict",
        "tool:book_shift",
        "ShiftConflict",
        lambda r: (
            f"{r.choice(USERS[:2])} is already booked as {r.choice(BOOKED_ROLES)} on {r.choice(WEEKDAYS)} "
            f"(booking {r.randrange(10000, 99999)})"
        ),
        lambda r: f'{{"worker": "{r.choice(USERS[:2])}", "day": "{r.choice(WEEKDAYS)}"}}',
    ),
)
