"""The quality gate (issue 16, "specific entries from contrasts"): an entry whose action restates
the endpoint or says nothing a reader could act on, or that is tied to one id, city or request, is
refused; the canonical specific phrasings pass. Every entry of a ``make demo`` run is a case."""

from __future__ import annotations

import pytest

from opslake.analysis.catalog.known import vocabulary_of
from opslake.analysis.playbooks import QUALITY, generalize, quality_refusal
from tests.vocabulary import staffing_vocabulary

PASS = None
R1 = "restates the endpoint"  # the action only restates its endpoint
R2 = "names nothing actionable"
R3 = "tied to one instance"
EMPTY = "empty action"

# (trigger, action, instead_of, endpoint, expected): expected is None (published) or a part of the reason
DEMO = [
    # make demo's entries (the truncated forms are as the demo printed them)
    ("SQL question over workers", "Describe the table first (GET /tables/workers), then select listed columns",
     None, "/sql", PASS),  # names a route and a table; the experiment decides whether it helps
    ("/sql call that risks unknown column",
     "Column 'availability_status' does not exist: call GET /tables/{name} and use the listed columns before "
     "writing SQL", None, "/sql", PASS),  # names the route that lists the real columns
    ("/sql call that risks unknown column",
     "Column 'availability_status' does not exist: call GET /tables/{name} and use the …", None, "/sql", PASS),
    ("sql question task using /tables/{name}", "Call GET /tables/{name} as other agents did", None,
     "/tables/{name}", R1),
    ("worker lookup task using /worker/{id}", "Call GET /worker/{id} as other agents did", None, "/worker/{id}", R1),
    ("llm task using runtime:model_call", "Call runtime:model_call as other agents did", None,
     "runtime:model_call", R1),
    ("/sql call that risks resource limit",
     "Queries on /sql are too broad: add WHERE filters (on ops, the dt/hour partitions), select only the needed "
     "columns, aggregate in SQL and add a LIMIT", None, "/sql", PASS),  # SQL clauses to add
    ("/sql call that risks resource limit",
     "Queries on /sql are too broad: add WHERE filters (on ops, the dt/hour partitions …", None, "/sql", PASS),
    ("/match call that risks missing fields",
     "Requests to /match miss required fields (role, city, state): always send them", None, "/match", PASS),
    ("/worker/{id} call that risks not found",
     "Worker 'W90519' does not exist: use worker ids returned by POST /match or /sql instead of guessing them",
     None, "/worker/{id}", R3),
    ("/worker/{id} call that risks not found",
     "Worker 'W90519' does not exist: use worker ids returned by POST /match or /sql i…", None, "/worker/{id}", R3),
    ("staff job task using /match", "Call /match as other agents did", None, "/match", R1),
    ("staff job: assembler in Tucson, AZ", "POST /match with role and state, then GET /worker/{id} for the top 5",
     None, "/match", R3),
]  # fmt: skip

CANONICAL = [
    ("SQL question over workers", "Use the column hourly_rate of workers", "salary, pay_rate", "/sql"),
    ("staff job", "Send role and city or state in the POST /match body", "a body with only need and count", "/match"),
    ("staff job", "Send role and a city or state (two-letter code) in the POST /match body", None, "/match"),
    ("worker lookup", "Use worker ids of the form W + five digits (^W[0-9]{5}$)", "ids like w-999 or 9999",
     "/worker/{id}"),
    ("worker lookup", "Use worker ids of the form W + 5 digits (^W[0-9]{5}$)", None, "/worker/{id}"),
    ("worker lookup", "Take worker ids from a POST /match or /sql answer; never guess them", None, "/worker/{id}"),
    ("worker lookup", "Take worker ids from a POST /match or POST /sql answer; never guess them", None,
     "/worker/{id}"),
    ("SQL question", "Aggregate in SQL (count(*), avg()) instead of listing rows: /sql cuts answers at its row limit",
     None, "/sql"),
    ("SQL question", "Build the POST /sql body with a JSON encoder (json.dumps), never by hand", None, "/sql"),
    ("llm task", "Keep model prompts under 8000 input tokens", None, "runtime:model_call"),
    ("llm task", "Keep model prompts under 12000 input tokens", None, "runtime:model_call"),
    ("staff job: {role} in {city}, {state}", "POST /match with role and state, then GET /worker/{id} for the top 5",
     None, "/match"),  # the Tucson entry, generalized
]  # fmt: skip

EDGES = [
    # empty and bare
    ("t", "", None, "/sql", EMPTY),
    ("t", "   ", None, "/sql", EMPTY),
    ("t", "/worker/{id}", None, "/worker/{id}", R1),
    ("t", "runtime:model_call", None, "runtime:model_call", R1),
    ("t", "Use /sql", None, "/sql", R1),
    ("t", "Use /sql", None, None, "only names a call"),
    ("t", "Call GET /tables/workers", None, "/sql", PASS),  # a validated route's concrete value: a table
    ("t", "Call GET /orders/summary", None, "/sql", R2),  # an unknown route's parts are no names
    ("t", "Call POST /match", None, "/sql", "only names a call"),
    # mixed case and Unicode look-alikes (Cyrillic а, о) and full-width digits read as what they imitate
    ("t", "CALL get /WORKER/{ID} AS OTHER AGENTS DID", None, "/worker/{id}", R1),
    ("t", "Call GET /wоrker/{id} аs оther аgents did", None, "/worker/{id}", R1),
    ("t", "use the COLUMN Hourly_Rate of WORKERS", None, "/sql", PASS),
    ("t", "Worker 'Ｗ９０５１９' does not exist: use worker ids returned by POST /match", None, "/worker/{id}", R3),
    ("t", "Worker 'Ԝ90519' does not exist: use worker ids returned by POST /match", None, "/worker/{id}", R3),
    ("staff job: welder in Tucsоn", "Send role and state in the POST /match body", None, "/match", R3),
    # words that say nothing
    ("t", "Calls to tool:x fail (see the error): read the error and change the input; do not repeat an identical "
     "call", None, "tool:x", R2),
    ("t", "Avoid the call pattern that fails for other agents on /match", None, "/match", R2),
    ("t", "Be careful with /match", None, "/match", R1),
    ("t", "Add more context and try again", None, "/ask", R2),  # context is a field, but not named as one
    ("t", "Call /match with role only and take the first worker", None, "/match", R2),  # one English name alone
    ("t", "Call /match with role, city and state", None, "/match", PASS),  # a list of fields says what to send
    ("t", "Think harder about the question", None, "/ask", R2),
    # a request's literals: refused until generalized
    ("t", 'Call POST /match shaped like {"role":"nurse","count":{num}}', None, "/match", R3),
    ("t", 'Call POST /match shaped like {"role":"{role}","count":{num}}', None, "/match", PASS),
    ("t", "SELECT avg(hourly_rate) FROM workers WHERE city = 'Tucson'", None, "/sql", R3),
    ("t", "Send role and state in the POST /match body", "a body with state 'AZ'", "/match", R3),
    # an entry that was only its instance says nothing once generalized
    ("t", "An id does not exist", None, "/worker/{id}", R2),
    ("t", "Use an id", None, "/worker/{id}", R1),
    ("t", "Use the column hourly_rate of workers", None, "/sql", PASS),
    ("t", "Use the column hourly_rate of workers " * 200, None, "/sql", "longer than"),
]  # fmt: skip


def _verdict(trigger: str, action: str, instead_of: str | None, endpoint: str | None) -> str | None:
    """The gate's verdict with the vocabulary a run over the staffing demo's traffic reads."""
    return quality_refusal(trigger, action, instead_of, endpoint, "task", vocabulary=staffing_vocabulary())


@pytest.mark.parametrize(("trigger", "action", "instead_of", "endpoint", "expected"), DEMO + EDGES)
def test_quality_gate_verdicts(
    trigger: str, action: str, instead_of: str | None, endpoint: str | None, expected: str | None
) -> None:
    reason = _verdict(trigger, action, instead_of, endpoint)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and reason.startswith(QUALITY) and expected in reason, reason


@pytest.mark.parametrize(("trigger", "action", "instead_of", "endpoint"), CANONICAL)
def test_canonical_specific_phrasings_pass(
    trigger: str, action: str, instead_of: str | None, endpoint: str
) -> None:
    assert _verdict(trigger, action, instead_of, endpoint) is None
    assert _verdict(trigger, action, instead_of, None) is None  # whatever the endpoint claimed


def test_the_demo_verdicts_are_the_issue_s() -> None:
    """The issue names the "as other agents did" entries, the W90519 one and the Tucson one as bad;
    the demo's other entries name a route, a table, fields or SQL clauses and are left to the experiment."""
    for trigger, action, _, _, expected in DEMO:
        named_bad = "as other agents did" in action or "W90519" in action or "Tucson" in trigger
        assert (expected is not None) == named_bad, action


@pytest.mark.parametrize(
    ("trigger", "action", "endpoint"),
    [(t, a, e) for t, a, _, e, expected in DEMO if expected == R3],
)
def test_an_instance_entry_passes_once_generalized(trigger: str, action: str, endpoint: str) -> None:
    vocabulary = staffing_vocabulary()
    general_trigger, in_trigger = generalize(trigger, vocabulary.instances, vocabulary.fields)
    general_action, in_action = generalize(action, vocabulary.instances, vocabulary.fields)
    assert in_trigger or in_action
    assert _verdict(general_trigger, general_action, None, endpoint) is None


def test_the_gate_reads_names_from_the_vocabulary_it_is_given() -> None:
    vocabulary = vocabulary_of(tables={"orders": ["order_total"]}, routes=["/orders/{id}"])
    action = "Use the column order_total of orders"
    assert quality_refusal("t", action, None, "/orders/{id}", None, vocabulary=vocabulary) is None
    assert quality_refusal("t", action, None, "/orders/{id}", None) is not None  # no data: no names


def test_another_tool_s_argument_is_no_name_of_this_tool() -> None:
    """Advice about a shell tool that says "paths" names nothing of it, though a file reader takes
    an argument called paths; the same advice about the file reader names its argument."""
    from opslake.models.catalog import ArgumentStat, ToolCatalog, ToolStat

    witnesses = ["k1", "k2"]

    def tool(endpoint: str, *arguments: str) -> ToolStat:
        return ToolStat(
            endpoint=endpoint, calls=9, witnesses=witnesses,
            arguments=[ArgumentStat(name=a, calls=9, witnesses=witnesses) for a in arguments],
        )  # fmt: skip

    vocabulary = vocabulary_of(
        ToolCatalog(tools=[tool("tool:run_command", "command"), tool("tool:read_files", "paths")])
    )
    action = "The file asked for does not exist: read only paths or keys that an earlier step listed"
    refused = quality_refusal("t", action, None, "tool:run_command", None, vocabulary=vocabulary)
    assert refused is not None and "names nothing actionable" in refused
    assert quality_refusal("t", action, None, "tool:read_files", None, vocabulary=vocabulary) is None


def test_a_tool_named_in_capitals_is_a_name() -> None:
    """Tools keep their names as sent (``API-post-search``); the gate reads text case-folded and
    still knows them."""
    from opslake.models.catalog import ToolCatalog, ToolStat

    witnesses = ["k1", "k2"]
    vocabulary = vocabulary_of(
        ToolCatalog(tools=[ToolStat(endpoint=e, calls=9, witnesses=witnesses)
                           for e in ("tool:API-post-page", "tool:API-post-search")])
    )  # fmt: skip
    action = "Call tool:API-post-search before tool:API-post-page"
    assert quality_refusal("t", action, None, "tool:API-post-page", None, vocabulary=vocabulary) is None
