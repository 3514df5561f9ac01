"""The planted mistakes and the tasks they happen in: each mode's steps and default rate, the steps
of each task, the SQL questions with the column names a careless agent guesses, and an overseer's
correction per mode. What a playbook entry must say to switch a mode off is in :mod:`.follow`."""

from __future__ import annotations

from dataclasses import dataclass

TASK_CLASSES = ("staff_job", "sql_question", "worker_lookup")
WORKER_ROUTE = "/worker/{id}"
MODEL_CALL = "runtime:model_call"
# The runtime's own model call (its span's model and token usage when the fleet reports through OTLP).
RUNTIME_MODEL = "sim-large-1"
PROMPT_TOKENS = 48_000  # the prompt that times out
SMALLER_PROMPT_TOKENS = 12_000  # the retry's
ANSWER_TOKENS = 600
#: How a runtime reports the playbook entries it followed: opslake_sdk's ``report_followed`` shape
#: (``opslake_sdk.client.FOLLOWED_ENDPOINT``/``FOLLOWED_EVENT_KIND``; a test keeps them equal).
FOLLOWED_ENDPOINT = "playbook:followed"
FOLLOWED_EVENT_KIND = "playbook_followed"


@dataclass(frozen=True)
class Mode:
    """A planted mistake: where it happens and how likely it is by default."""

    name: str
    endpoints: tuple[str, ...]
    base_rate: float
    description: str


MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode("sql_guessed_column", ("/sql",), 0.4,
             "SQL with a guessed column name (salary instead of hourly_rate)"),
        Mode("sql_row_cap", ("/sql",), 0.25,
             "lists rows and counts them itself: the answer is cut at the row cap"),
        Mode("malformed_body", ("/sql", "/match"), 0.08,
             "a hand-built JSON body cut short"),
        Mode("worker_guessed_id", (WORKER_ROUTE,), 0.35,
             "GET /worker/{id} with an id from memory (unknown or malformed)"),
        Mode("match_missing_filters", ("/match",), 0.3,
             "POST /match without role and city/state"),
        Mode("runtime_timeout", (MODEL_CALL,), 0.12,
             "the agent's own model call times out (reported to /events)"),
    )
}  # fmt: skip
# Which modes each task can hit.
TASK_MODES: dict[str, tuple[str, ...]] = {
    "staff_job": ("match_missing_filters", "malformed_body", "worker_guessed_id", "runtime_timeout"),
    "sql_question": ("sql_guessed_column", "sql_row_cap", "malformed_body", "runtime_timeout"),
    "worker_lookup": ("worker_guessed_id", "runtime_timeout"),
}
TASK_ENDPOINTS: dict[str, tuple[str, ...]] = {
    "staff_job": ("/match", WORKER_ROUTE, MODEL_CALL),
    "sql_question": ("/sql", MODEL_CALL),
    "worker_lookup": ("/sql", WORKER_ROUTE, MODEL_CALL),
}


# ---- SQL questions ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Question:
    """A data question: the SQL with ``{col}`` where the agent may guess a column name wrong."""

    name: str
    table: str
    text: str
    sql: str
    column: str  # the real column behind {col}
    guesses: tuple[str, ...]  # what a careless agent writes instead
    listing_sql: str  # how an agent that lists rows instead of aggregating asks (hits the row cap)


QUESTIONS: tuple[Question, ...] = (
    Question("avg_rate", "workers", "average hourly rate of {role}s in {state}",
             "SELECT round(avg({col}), 2) AS avg_rate, count(*) AS workers FROM workers "
             "WHERE role = '{role}' AND state = '{state}'",
             "hourly_rate", ("salary", "pay_rate", "hourly_wage"),
             "SELECT worker_id, hourly_rate FROM workers WHERE role = '{role}'"),
    Question("available", "workers", "how many {role}s can start immediately",
             "SELECT count(*) AS available FROM workers WHERE role = '{role}' AND {col} = 'immediate'",
             "availability", ("status", "available_from", "availability_status"),
             "SELECT worker_id FROM workers WHERE role = '{role}'"),
    Question("active_by_client", "placements", "active placements per client",
             "SELECT client, count(*) AS active FROM placements WHERE {col} = 'active' "
             "GROUP BY client ORDER BY active DESC",
             "status", ("placement_status", "state_code", "is_active"),
             "SELECT placement_id, client FROM placements"),
    Question("top_rated", "workers", "best rated {role}s in {state}",
             "SELECT worker_id, name, {col} FROM workers WHERE role = '{role}' AND state = '{state}' "
             "ORDER BY {col} DESC, worker_id LIMIT 5",
             "rating", ("score", "stars", "review_score"),
             "SELECT worker_id, rating FROM workers WHERE role = '{role}'"),
)  # fmt: skip

# What an overseer tells an agent after each mistake (reported by the runtime as a correction).
CORRECTIONS = {
    "sql_guessed_column": "describe the table with GET /tables/{name} and use its columns (hourly_rate, not salary)",
    "sql_row_cap": "aggregate in SQL (count(*), avg) instead of listing rows: the answer was cut at the row cap",
    "malformed_body": "send the body as JSON built by an encoder, not by hand",
    "worker_guessed_id": "find worker ids with POST /match or POST /sql before GET /worker/{id}",
    "match_missing_filters": "POST /match needs role and a city or state",
    "runtime_timeout": "use a smaller prompt",
}
