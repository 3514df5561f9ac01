"""Legitimate lesson texts the fence must accept: what the simulator's agents write to /log, the
heuristic diagnoser's advice over this repo's tool errors, and the texts of existing fixtures."""

from __future__ import annotations

import importlib.util
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

from opslake.analysis.heuristics import diagnose_heuristically
from opslake.analysis.signatures import signature_id, template_of
from opslake.datasets.staffing import CITIES, ROLES
from opslake.models.analysis import FailureSample, Signature

T0 = datetime(2026, 11, 1, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[3]


def _simulator_modes() -> ModuleType:
    """local/opslake_local/simulator/modes.py, loaded alone: the simulator package imports the
    local stack (and moto), which unit tests never load."""
    path = ROOT / "local" / "opslake_local" / "simulator" / "modes.py"
    spec = importlib.util.spec_from_file_location("simulator_modes_for_corpus", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def simulator_texts() -> list[str]:
    """Every operation, approach and context the simulated agents post to /log
    (local/opslake_local/simulator/tasks.py, TaskRun.log), and their overseers' corrections."""
    modes = _simulator_modes()
    texts: list[str] = []
    for task_class in ("staff_job", "sql_question", "worker_lookup"):
        for role in ROLES:
            for city, state in CITIES:
                texts.append(f"{task_class.replace('_', ' ')}: {role.name} in {city}, {state}"[:200])
    texts += [f"POST /match with role and state, then GET /worker/{{id}} for the top {n}" for n in (2, 3, 4)]
    texts += [f"described {q.table} with GET /tables first; used {q.column}" for q in modes.QUESTIONS]
    texts.append("found the worker id with POST /sql before GET /worker/{id}")
    texts += [f"first attempt failed ({m}); the careful way worked" for m in modes.MODES]
    texts += list(modes.CORRECTIONS.values())
    texts += ["retried /sql the careful way: worked", "retried with a smaller prompt"]
    return texts


_ERRORS = (
    ("/sql", "sql_column_not_found", "COLUMN_NOT_FOUND: line 1:8: Column 'salry' cannot be resolved"),
    ("/sql", "sql_table_not_found", "Table 'awsdatacatalog.opslake.employees' does not exist"),
    ("/sql", "sql_table_not_allowed", "table 'ops' is not allowed; available tables: workers, placements"),
    ("/sql", "sql_function_not_found", "Function 'median' not registered"),
    ("/sql", "sql_timeout", "Query did not finish within 25 s"),
    ("/sql", "sql_syntax_error", "SYNTAX_ERROR: line 1:15: mismatched input 'FROM'"),
    ("/sql", "sql_too_expensive", "Query exhausted resources at this scale factor"),
    ("/sql", None, "answer incomplete: /sql returned truncated=true at the 100-row limit"),
    ("/worker/{id}", "not_found", "no worker with id 'W99999'"),
    ("/match", "bad_request", "missing required filter(s): role, state or city"),
    ("/match", "malformed_json", "Expecting ',' delimiter: line 1 column 40 (char 39)"),
    ("/profile/{agent_id}", "not_found", "agent 'bob' has no ops in the last 24 hours"),
    ("/tables/{name}", "not_found", "no table 'employees'"),
    ("runtime:model_call", "Timeout", "model call timed out after 30000 ms (prompt of 48k tokens)"),
    ("tool:web_search", "http_429", "429 Too Many Requests"),
    ("tool:crm", "http_403", "AccessDenied: not authorized to perform this action"),
    ("tool:files", "FileNotFoundError", "No such file or directory: 'reports/q3.csv'"),
    ("tool:llm", "ContextLengthExceeded", "This model's maximum context length is 8192 tokens"),
    ("tool:db", "ConnectionError", "connection refused"),
    ("tool:x", "weird", "something odd happened, retry later"),
)


def heuristic_texts() -> list[str]:
    """The heuristic diagnoser's advice (a served action of "avoid" entries) and causes."""
    texts: list[str] = []
    for endpoint, error_type, error in _ERRORS:
        template = template_of(endpoint, error_type, error)
        sig = Signature(
            signature_id=signature_id(template), endpoint=endpoint, error_type=error_type,
            template=template, count=3, first_seen=T0, last_seen=T0,
        )  # fmt: skip
        sample = FailureSample(
            op_id="op-1", endpoint=endpoint, agent_id="a", ts=T0, ingested_at=T0, error=error,
            error_type=error_type,
        )  # fmt: skip
        answer = diagnose_heuristically(sig, [sample])
        texts += [answer.agent_adjustment, f"{endpoint} call that risks {answer.category.replace('_', ' ')}"]
    return texts


FIXTURE_TEXTS = [
    # tests/unit/analysis/test_sanitize.py, tests/unit/analysis/test_playbook_logic.py,
    # tests/integration/test_log_provenance.py
    "Describe the table first (GET /tables/workers), then select listed columns",
    "SQL question over workers and placements",
    "filter on dt first; rows where x < 3 and y > 2",
    "ignore null rows when averaging",
    "Call POST /match with role, city and state",
    "avoid SELECT * on ops; name the columns",
    "match on city and state",
    "fill a shift: nights",
    "match on role: welder",
    "staff job: welder in Reno, NV",
    "fill a shift: night crew",
    "match by role: welder, then by city: Austin",
    "ask /match with a 25 mile radius",
    "no rows: the city filter was too narrow",
    "Describe the tables first (GET /tables/workers, GET /tables/placements), then select listed columns",
    "List tables (GET /tables), describe one, then select listed columns",
    'Call POST /match shaped like {"count":{num},"need":{str},"role":{str},"state":{str}}',
    "staffing task using /match",
    "Call GET /worker/{id} as other agents did",
    "join placements p on p.worker_id = w.worker_id and filter on placements.status",
    "Use workers.hourly_rate, not salary; it is a double",
    "Send at most 5 requests per second; honour Retry-After after a 429",
]
#: Honest lessons the third review of issue 12 found refused (authority nouns, header names, a quoted
#: error message, the word "dot", "at the app", a spelled decimal).
REVIEW_TEXTS = [
    "Use the retry policy of 3 attempts with backoff",
    "Check file permissions with ls -l before writing to /tmp",
    "Use the allowed values for status: active, ended",
    "The API allows at most 100 rows per page; use limit 100",
    "Request admin access only for DDL",
    "Use any tool that lists tables before writing SQL",
    "The /v1 route is obsolete; call /match",
    "Use a signed URL to download the file",
    "Add the Accept header after the Content-Type header",
    "Read the headers that follow the status line",
    "Fix 'You have an error in your SQL syntax' by quoting reserved words in /sql",
    "Use the dot notation for nested fields in /sql",
    "Escape the dot in LIKE patterns",
    "Compute the dot product of the two vectors",
    "Use a dot as the decimal separator",
    "Validate the role at the app layer before /match",
    "Look at each app log before retrying",
    "Use 1 point 5 as the overtime rate",
]


def legitimate_texts() -> list[str]:
    return [*simulator_texts(), *heuristic_texts(), *FIXTURE_TEXTS, *REVIEW_TEXTS]
