"""A planted-failure generator: ops with failures drawn from known modes, for the analyzer benchmarks.

Each of the 40 modes is one real problem (an unknown column on /sql, a guessed worker id, a
throttled model call …) whose error text varies the way real texts do: ids, numbers, quoted
names, timestamps, UUIDs, paths. A good signature scheme gives one signature per mode.

    from planted import generate
    data = generate(n_ops=1_000_000, failure_rate=0.01, seed=7)
    data.columns["error"][i], data.columns["mode"][i]   # mode is None for successes
"""

from __future__ import annotations

import random
import string
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

R = random.Random
Text = Callable[[R], str]

COLUMNS = ("salry", "salary_3", "ratng", "hourly_rate2", "worker_name", "skillz", "city_id", "start_dt")
TABLES = ("workerz", "placement", "ops_2024", "jobs", "staff_v2", "workers_old")
FUNCTIONS = ("date_diff_days", "str_to_date", "datediff", "ifnull", "to_char", "nvl2")
CITIES = ("Austin", "Dallas", "Houston", "Denver", "Phoenix", "Tulsa", "Omaha")
ROLES = ("welder", "electrician", "pipefitter", "forklift operator", "millwright")
ALLOWED = "ops, placements, workers"


def _hex(rng: R, n: int) -> str:
    return "".join(rng.choices("0123456789abcdef", k=n))


def _uuid(rng: R) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _ulid(rng: R) -> str:
    return rng.choice("01") + "".join(rng.choices("0123456789ABCDEFGHJKMNPQRSTVWXYZ", k=25))


def _ts(rng: R) -> str:
    moment = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randrange(30_000_000))
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if rng.random() < 0.5 else moment.isoformat()


def _word(rng: R, n: int = 6) -> str:
    return "".join(rng.choices(string.ascii_lowercase, k=n))


def _sql(rng: R, column: str | None = None, table: str = "workers") -> str:
    column = column or rng.choice(("rating", "city", "role", "hourly_rate"))
    return (
        f'{{"sql": "SELECT worker_id, {column} FROM {table} WHERE city = \'{rng.choice(CITIES)}\' '
        f'LIMIT {rng.randrange(1, 500)}", "limit": {rng.choice((100, 500, 1000))}}}'
    )


@dataclass(frozen=True)
class Mode:
    """One planted failure mode: where it happens, its stable code, and how its texts vary."""

    name: str
    endpoint: str
    error_type: str | None
    error: Text
    input: Text


MODES: tuple[Mode, ...] = (
    Mode(
        "sql_unknown_column",
        "/sql",
        "sql_column_not_found",
        lambda r: (
            f"COLUMN_NOT_FOUND: line 1:{r.randrange(8, 300)}: Column '{r.choice(COLUMNS)}' cannot be resolved"
        ),
        lambda r: _sql(r, r.choice(COLUMNS)),
    ),
    Mode(
        "sql_unknown_column_v2",
        "/sql",
        "sql_column_not_found",
        lambda r: (
            f"SYNTAX_ERROR: line {r.randrange(1, 9)}:{r.randrange(1, 200)}: "
            f"Column '{r.choice(COLUMNS)}' cannot be resolved"
        ),
        lambda r: _sql(r, r.choice(COLUMNS)),
    ),
    Mode(
        "sql_unknown_table",
        "/sql",
        "sql_table_not_found",
        lambda r: (
            f"TABLE_NOT_FOUND: line 1:{r.randrange(15, 90)}: Table "
            f"'awsdatacatalog.opslake_{r.choice(('dev', 'prod', 'stg'))}.{r.choice(TABLES)}' does not exist"
        ),
        lambda r: _sql(r, table=r.choice(TABLES)),
    ),
    Mode(
        "sql_syntax",
        "/sql",
        "sql_syntax_error",
        lambda r: (
            f"SYNTAX_ERROR: line {r.randrange(1, 6)}:{r.randrange(1, 120)}: mismatched input "
            f"'{r.choice(('FROM', 'WHERE', ',', 'LIMIT', ')'))}'. Expecting: <expression>"
        ),
        lambda r: _sql(r),
    ),
    Mode(
        "sql_timeout",
        "/sql",
        "sql_timeout",
        lambda r: (
            f"Athena query {_uuid(r)} did not finish within {r.choice((10, 20, 25))} s and was cancelled; "
            "add a filter on dt/hour or aggregate less, then retry"
        ),
        lambda r: '{"sql": "SELECT endpoint, count(*) FROM ops GROUP BY endpoint"}',
    ),
    Mode(
        "sql_throttled",
        "/sql",
        "sql_throttled",
        lambda r: (
            "the query engine is unavailable: Athena is throttling requests (ThrottlingException on "
            f"StartQueryExecution, {r.randrange(3, 8)} attempts); retry after {r.randrange(1, 30)} s"
        ),
        lambda r: _sql(r),
    ),
    Mode(
        "sql_scan_limit",
        "/sql",
        "sql_scan_limit_exceeded",
        lambda r: (
            f"Bytes scanned limit was exceeded: {r.randrange(10**9, 10**11)} bytes scanned; the workgroup "
            "limits bytes scanned per query: filter on the partition columns dt and hour"
        ),
        lambda r: '{"sql": "SELECT * FROM ops"}',
    ),
    Mode(
        "sql_memory",
        "/sql",
        "sql_too_expensive",
        lambda r: (
            f"EXCEEDED_LOCAL_MEMORY_LIMIT: Query exceeded per-node memory limit of {r.choice((4, 8, 16))}GB "
            f"[Allocated: {r.uniform(3, 16):.2f}GB, Delta: {r.uniform(1, 900):.2f}MB, Top Consumers: "
            f"{{HashAggregationOperator={r.uniform(1, 9):.2f}GB}}] (query {_uuid(r)})"
        ),
        lambda r: '{"sql": "SELECT agent_id, array_agg(input_summary) FROM ops GROUP BY agent_id"}',
    ),
    Mode(
        "sql_unknown_function",
        "/sql",
        "sql_function_not_found",
        lambda r: (
            f"FUNCTION_NOT_FOUND: line 1:{r.randrange(8, 80)}: Function '{r.choice(FUNCTIONS)}' not registered"
        ),
        lambda r: _sql(r, f"{r.choice(FUNCTIONS)}(start_dt)"),
    ),
    Mode(
        "sql_type_mismatch",
        "/sql",
        "sql_type_mismatch",
        lambda r: f"TYPE_MISMATCH: line 1:{r.randrange(20, 200)}: Cannot apply operator: varchar = integer",
        lambda r: f'{{"sql": "SELECT * FROM workers WHERE worker_id = {r.randrange(1, 99999)}"}}',
    ),
    Mode(
        "sql_table_not_allowed",
        "/sql",
        "sql_table_not_allowed",
        lambda r: (
            f"table '{r.choice(('information_schema.tables', 'secrets', 'pg_user', 'admin_keys'))}' is not "
            f"allowed; only one read-only query (SELECT, WITH … SELECT, UNION) over these tables is allowed: {ALLOWED}"
        ),
        lambda r: '{"sql": "SELECT * FROM information_schema.tables"}',
    ),
    Mode(
        "sql_engine_failed",
        "/sql",
        "sql_engine_failed",
        lambda r: (
            "the query engine failed while running the query (not a problem with the SQL); retry later or report it"
        ),
        lambda r: _sql(r),
    ),
    Mode(
        "worker_not_found",
        "/worker/{id}",
        "not_found",
        lambda r: f"no worker with id 'W{r.randrange(10000, 99999):05d}'",
        lambda r: f"GET /worker/W{r.randrange(10000, 99999):05d}",
    ),
    Mode(
        "worker_bad_id",
        "/worker/{id}",
        "bad_request",
        lambda r: (
            "worker id must be W followed by five digits, e.g. W00042 (got "
            f"'{r.choice(('W-', 'worker_', 'w', ''))}{r.randrange(1, 99999)}')"
        ),
        lambda r: f"GET /worker/worker_{r.randrange(1, 999)}",
    ),
    Mode(
        "table_not_found",
        "/tables/{name}",
        "not_found",
        lambda r: f"no table '{r.choice(TABLES)}'; available tables: {ALLOWED}",
        lambda r: f"GET /tables/{r.choice(TABLES)}",
    ),
    Mode(
        "match_missing_place",
        "/match",
        "bad_request",
        lambda r: (
            "missing required filter(s): city or state; a match needs a role and a city and/or a state "
            "(two-letter code)"
        ),
        lambda r: (
            f'{{"role": "{r.choice(ROLES)}", "need": "{r.choice(ROLES)} with {r.randrange(2, 9)} years"}}'
        ),
    ),
    Mode(
        "match_count_too_high",
        "/match",
        "bad_request",
        lambda r: "invalid request: count: Input should be less than or equal to 50",
        lambda r: (
            f'{{"role": "{r.choice(ROLES)}", "city": "{r.choice(CITIES)}", "count": {r.randrange(51, 500)}}}'
        ),
    ),
    Mode(
        "match_need_no_skill",
        "/match",
        "bad_request",
        lambda r: (
            "need names no skill or certification to match on; describe the work, e.g. "
            "'TIG welding on stainless pipe, AWS D1.1'"
        ),
        lambda r: f'{{"role": "{r.choice(ROLES)}", "city": "{r.choice(CITIES)}", "need": "{_word(r)}"}}',
    ),
    Mode(
        "events_future_ts",
        "/events",
        "invalid_ops",
        lambda r: (
            f"op {r.randrange(0, 500)}: ts is {r.uniform(24.1, 900):.1f} h in the future; it may be at most "
            "24 h ahead of the server"
        ),
        lambda r: f'{{"ops": [{{"endpoint": "/sql", "ts": "{_ts(r)}"}}]}}',
    ),
    Mode(
        "events_record_too_large",
        "/events",
        "payload_too_large",
        lambda r: (
            f"the record is {r.randrange(65537, 400000)} bytes once serialized; the limit is 65536 "
            "(shorten attributes or summaries)"
        ),
        lambda r: (
            f'{{"ops": [{{"endpoint": "tool:{_word(r, 5)}", "attributes": {{"n": {r.randrange(50)}}}}}]}}'
        ),
    ),
    Mode(
        "stats_timeout",
        "/stats",
        "query_unavailable",
        lambda r: (
            f"Athena query {_uuid(r)} did not finish within {r.choice((8, 10, 12))} s and was cancelled"
        ),
        lambda r: f"GET /stats?hours={r.randrange(1, 720)}",
    ),
    Mode(
        "profile_no_ops",
        "/profile/{agent_id}",
        "not_found",
        lambda r: (
            f"agent 'agent-{r.randrange(1, 5000)}' has no ops in the last {r.choice((24, 48, 168))} hours"
        ),
        lambda r: f"GET /profile/agent-{r.randrange(1, 5000)}?hours={r.choice((24, 48, 168))}",
    ),
    Mode(
        "http_read_timeout",
        "tool:http_get",
        "ReadTimeout",
        lambda r: (
            f"HTTPSConnectionPool(host='api.{r.choice(('weather', 'maps', 'geo'))}.example.com', port=443): "
            f"Read timed out. (read timeout={r.choice((5, 10, 30, 60))})"
        ),
        lambda r: f'{{"url": "https://api.example.com/v1/items/{r.randrange(10**6)}"}}',
    ),
    Mode(
        "http_429",
        "tool:http_get",
        "http_429",
        lambda r: (
            f"429 Too Many Requests: rate limit exceeded for key {_hex(r, 12)}; retry after {r.randrange(1, 90)}s"
        ),
        lambda r: f'{{"url": "https://api.example.com/v1/search?q={_word(r)}"}}',
    ),
    Mode(
        "s3_access_denied",
        "tool:s3_get",
        "AccessDenied",
        lambda r: (
            "An error occurred (AccessDenied) when calling the GetObject operation: User: "
            f"arn:aws:sts::{r.randrange(10**11, 10**12)}:assumed-role/agent-{r.randrange(1, 99)}/i-{_hex(r, 17)} "
            f"is not authorized to perform: s3:GetObject on resource: arn:aws:s3:::data-{r.randrange(1, 99)}/"
            f"raw/{_word(r)}.json"
        ),
        lambda r: f'{{"bucket": "data-{r.randrange(1, 99)}", "key": "raw/{_word(r)}.json"}}',
    ),
    Mode(
        "s3_no_such_key",
        "tool:s3_get",
        "NoSuchKey",
        lambda r: (
            "An error occurred (NoSuchKey) when calling the GetObject operation: The specified key does not "
            f"exist. (key: reports/{_ts(r)[:10]}/{_uuid(r)}.csv)"
        ),
        lambda r: f'{{"bucket": "reports", "key": "reports/{_ts(r)[:10]}/{_uuid(r)}.csv"}}',
    ),
    Mode(
        "bedrock_throttled",
        "tool:bedrock_invoke",
        "ThrottlingException",
        lambda r: (
            "An error occurred (ThrottlingException) when calling the InvokeModel operation (reached max "
            f"retries: {r.randrange(2, 10)}): Too many requests, please wait before trying again."
        ),
        lambda r: f'{{"model": "claude", "max_tokens": {r.choice((512, 1024, 4096))}}}',
    ),
    Mode(
        "bedrock_input_too_long",
        "tool:bedrock_invoke",
        "ValidationException",
        lambda r: (
            "An error occurred (ValidationException) when calling the InvokeModel operation: Input is too long "
            f"for requested model. {r.randrange(200001, 900000)} tokens > 200000 maximum"
        ),
        lambda r: f'{{"model": "claude", "prompt_chars": {r.randrange(10**6, 4 * 10**6)}}}',
    ),
    Mode(
        "python_oom",
        "tool:python_exec",
        "OutOfMemory",
        lambda r: (
            f"Process {r.randrange(100, 65000)} killed: OutOfMemory (used {r.randrange(900, 4096)} MB of "
            f"{r.choice((1024, 2048, 4096))} MB) while running step {r.randrange(1, 40)}"
        ),
        lambda r: f'{{"code_lines": {r.randrange(5, 400)}}}',
    ),
    Mode(
        "python_file_not_found",
        "tool:python_exec",
        "FileNotFoundError",
        lambda r: (
            f"FileNotFoundError: [Errno 2] No such file or directory: '/tmp/work/{_uuid(r)}/input_{r.randrange(99)}.csv'"
        ),
        lambda r: f'{{"code": "pd.read_csv(\'/tmp/work/input_{r.randrange(99)}.csv\')"}}',
    ),
    Mode(
        "python_key_error",
        "tool:python_exec",
        "KeyError",
        lambda r: (
            f"KeyError: '{r.choice(COLUMNS)}' in /var/task/handlers/{r.choice(('load', 'clean', 'join'))}.py "
            f"line {r.randrange(10, 400)}"
        ),
        lambda r: f'{{"code_lines": {r.randrange(5, 400)}}}',
    ),
    Mode(
        "http_401_expired",
        "tool:http_post",
        "http_401",
        lambda r: f"HTTP 401 Unauthorized: token expired at {_ts(r)} for client {_hex(r, 24)}",
        lambda r: f'{{"url": "https://partner.example.com/v2/orders", "items": {r.randrange(1, 50)}}}',
    ),
    Mode(
        "http_503",
        "tool:http_post",
        "http_503",
        lambda r: (
            f"HTTP 503 Service Unavailable from https://partner.example.com/v2/orders/{r.randrange(10**6)}"
            f"?trace={_hex(r, 16)}"
        ),
        lambda r: f'{{"url": "https://partner.example.com/v2/orders", "items": {r.randrange(1, 50)}}}',
    ),
    Mode(
        "db_deadlock",
        "tool:db_query",
        "DeadlockDetected",
        lambda r: (
            f"deadlock detected: Process {r.randrange(100, 65000)} waits for ShareLock on transaction "
            f"{r.randrange(10**5, 10**8)}; blocked by process {r.randrange(100, 65000)}."
        ),
        lambda r: f'{{"sql": "UPDATE orders SET status = \'shipped\' WHERE id = {r.randrange(10**6)}"}}',
    ),
    Mode(
        "db_connection_refused",
        "tool:db_query",
        "OperationalError",
        lambda r: (
            "could not connect to server: Connection refused. Is the server running on host "
            f'"db-{r.randrange(1, 9)}.internal" (10.0.{r.randrange(256)}.{r.randrange(256)}) and accepting '
            "TCP/IP connections on port 5432?"
        ),
        lambda r: '{"sql": "SELECT 1"}',
    ),
    Mode(
        "email_bad_recipient",
        "tool:send_email",
        "InvalidRecipient",
        lambda r: (
            f"invalid recipient address {_word(r)}.{_word(r, 4)}@example{r.randrange(1, 99)}.com: mailbox "
            f"unavailable ({r.choice(('550 5.1.1', '550 5.1.10', '553 5.1.3'))})"
        ),
        lambda r: f'{{"to": "{_word(r)}@example.com", "subject": "{_word(r)}"}}',
    ),
    Mode(
        "runtime_step_limit",
        "runtime:step",
        "step_limit",
        lambda r: (
            f"agent agent-{r.randrange(1, 5000)} exceeded max steps ({r.choice((25, 50, 100))}) on task {_ulid(r)}"
        ),
        lambda r: f"task {_ulid(r)}",
    ),
    Mode(
        "runtime_context_overflow",
        "runtime:llm",
        "context_length_exceeded",
        lambda r: (
            f"This model's maximum context length is {r.choice((8192, 128000))} tokens. However, your messages "
            f"resulted in {r.randrange(8193, 300000)} tokens. Please reduce the length of the messages."
        ),
        lambda r: f"turn {r.randrange(1, 200)}",
    ),
    Mode(
        "runtime_json_decode",
        "runtime:tool_parse",
        "JSONDecodeError",
        lambda r: (
            f"JSONDecodeError: Expecting ',' delimiter: line {r.randrange(1, 40)} column {r.randrange(1, 200)} "
            f"(char {r.randrange(1, 5000)})"
        ),
        lambda r: f"tool call {r.choice(('search', 'sql', 'match'))} with {r.randrange(1, 9)} arguments",
    ),
    Mode(
        "runtime_llm_rate_limit",
        "runtime:llm",
        "rate_limit_error",
        lambda r: (
            f"Rate limit reached for gpt-4o in organization org-{_hex(r, 10)} on tokens per min (TPM): "
            f"Limit {r.choice((30000, 90000))}, Used {r.randrange(20000, 90000):,}, Requested "
            f"{r.randrange(100, 9000):,}. Please try again in {r.uniform(0.1, 9):.3f}s."
        ),
        lambda r: f"turn {r.randrange(1, 200)}",
    ),
)
SUCCESS_ENDPOINTS = (
    "/sql",
    "/match",
    "/worker/{id}",
    "/tables/{name}",
    "/tables",
    "tool:http_get",
    "runtime:llm",
)


@dataclass(frozen=True)
class Planted:
    """Columnar ops (one list per column, same length); ``mode`` is None for a success."""

    columns: dict[str, list[Any]]
    modes: tuple[Mode, ...]

    def __len__(self) -> int:
        return len(self.columns["op_id"])

    def failure_indexes(self) -> list[int]:
        return [i for i, ok in enumerate(self.columns["success"]) if not ok]


def generate(
    n_ops: int = 1_000_000,
    failure_rate: float = 0.01,
    modes: int | None = None,
    seed: int = 7,
    *,
    catalog: Sequence[Mode] | None = None,
    n_agents: int = 500,
    zipf: float = 1.0,
    start: datetime = datetime(2025, 6, 1, tzinfo=UTC),
) -> Planted:
    """``n_ops`` ops over one day, ``failure_rate`` of them failures from the first ``modes`` modes
    of ``catalog`` (all of them by default; the 40 above unless another catalog is given, e.g.
    bench/planted_words.py's) (frequencies Zipf-like: mode k weighs 1/k^zipf, so there are common
    and rare problems)."""
    catalog = MODES if catalog is None else tuple(catalog)
    modes = len(catalog) if modes is None else modes
    if not 1 <= modes <= len(catalog):
        raise ValueError(f"modes must be between 1 and {len(catalog)}")
    rng = random.Random(seed)
    chosen = tuple(catalog[:modes])
    n_fail = round(n_ops * failure_rate)
    failing = set(rng.sample(range(n_ops), n_fail))
    agents = [f"agent-{i:04d}" for i in range(n_agents)]
    start_ms = int(start.timestamp() * 1000)
    step = 86_400_000 // max(n_ops, 1)
    columns: dict[str, list[Any]] = {
        "op_id": [f"op-{seed}-{i:08d}" for i in range(n_ops)],
        "endpoint": rng.choices(SUCCESS_ENDPOINTS, k=n_ops),
        "agent_id": rng.choices(agents, k=n_ops),
        "ts_ms": [start_ms + i * step for i in range(n_ops)],
        "success": [True] * n_ops,
        "error_type": [None] * n_ops,
        "error": [None] * n_ops,
        "input_summary": [f"input {i % 97}" for i in range(n_ops)],
        "mode": [None] * n_ops,
    }
    weights = [1 / (k + 1) ** zipf for k in range(len(chosen))]
    picks = rng.choices(range(len(chosen)), weights=weights, k=n_fail)
    endpoint, error_type, error = columns["endpoint"], columns["error_type"], columns["error"]
    success, summary, label = columns["success"], columns["input_summary"], columns["mode"]
    for i, k in zip(sorted(failing), picks, strict=True):
        mode = chosen[k]
        endpoint[i], error_type[i], error[i] = mode.endpoint, mode.error_type, mode.error(rng)
        success[i], summary[i], label[i] = False, mode.input(rng), mode.name
    return Planted(columns, chosen)
