"""The Athena engine against moto: paging, typed values, failures, throttling, timeouts, the factory.

moto runs no SQL: each test injects the result rows (header row included, as Athena returns them)
into the backend's ``query_results_queue``. Three gaps in moto's Athena are filled here so the
engine meets Athena's real behaviour:

* GetQueryResults ignores MaxResults/NextToken and returns every row at once: the ``paged_moto``
  fixture makes it page like Athena (≤ 1000 rows a page, header row only on the first page).
* An execution is FAILED or CANCELLED only by setting its status on the backend, and
  GetQueryExecution never returns StateChangeReason or AthenaError: hooks on the client add them.
* Statistics.DataScannedInBytes is always 0: a hook sets it where a test checks bytes_scanned.

Polling and backoff use a fake clock and sleep, so no test waits in real time.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, cast

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.retries import standard as standard_retries
from moto import mock_aws
from moto.athena.models import AthenaBackend, QueryResults, athena_backends
from moto.athena.responses import AthenaResponse
from moto.core import DEFAULT_ACCOUNT_ID
from moto.core.exceptions import JsonRESTError
from moto.moto_api import state_manager

from opslake.config import Settings
from opslake.errors import ConfigurationError
from opslake.query.athena import AthenaEngine, converter_for
from opslake.query.base import QueryError, QueryFailedError, QueryTimeoutError
from opslake.query.factory import create_engine

REGION = "us-east-1"
BUCKET = "opslake-test-athena-results"
WORKGROUP = "opslake-test"
DATABASE = "opslake_test"


@dataclass
class FakeTime:
    """A clock that moves only when the engine sleeps."""

    now: float = 1000.0
    sleeps: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


@dataclass
class Athena:
    client: Any
    backend: AthenaBackend
    time: FakeTime
    pages: list[dict[str, Any]]

    def engine(self, **overrides: Any) -> AthenaEngine:
        options: dict[str, Any] = {
            "workgroup": WORKGROUP,
            "database": DATABASE,
            "sleep": self.time.sleep,
            "clock": self.time.clock,
            **overrides,
        }
        return AthenaEngine(self.client, **options)

    def inject(self, columns: list[tuple[str, str]], rows: list[list[str | None]]) -> None:
        """Queue the next query's results: Athena's header row, then ``rows`` (None → NULL cell)."""
        header = {"Data": [{"VarCharValue": name} for name, _ in columns]}
        data = [{"Data": [{} if v is None else {"VarCharValue": v} for v in row]} for row in rows]
        info = [
            {
                "CatalogName": "hive",
                "SchemaName": "",
                "TableName": "",
                "Name": name,
                "Label": name,
                "Type": type_,
                "Precision": 0,
                "Scale": 0,
                "Nullable": "UNKNOWN",
                "CaseSensitive": type_ == "varchar",
            }
            for name, type_ in columns
        ]
        results = QueryResults(rows=[header, *data], column_info=cast(Any, info))
        self.backend.query_results_queue.append(results)

    def hook(self, event: str, handler: Callable[..., None]) -> None:
        self.client.meta.events.register(event, handler)

    def set_state_after_start(self, state: str, reason: str | None = None, error: str | None = None) -> None:
        """Make every started query end in ``state``; GetQueryExecution reports Athena's reason."""

        def after_start(parsed: dict[str, Any], **_: Any) -> None:
            self.backend.executions[parsed["QueryExecutionId"]].status = state

        def after_get(parsed: dict[str, Any], **_: Any) -> None:
            status = parsed["QueryExecution"]["Status"]
            if reason is not None:
                status["StateChangeReason"] = reason
            if error is not None:
                status["AthenaError"] = {"ErrorCategory": 2, "ErrorType": 1006, "ErrorMessage": error}

        self.hook("after-call.athena.StartQueryExecution", after_start)
        self.hook("after-call.athena.GetQueryExecution", after_get)


def fail_calls(
    code: str, *, times: int, message: str = "Rate exceeded", retry_attempts: int = 0
) -> Callable[..., None]:
    """A before-call hook raising ``code`` for the first ``times`` calls; ``.calls`` counts them.

    ``retry_attempts`` is what botocore reports when it raises the error after its own retries."""
    calls = {"n": 0}

    def hook(model: Any, **_: Any) -> None:
        calls["n"] += 1
        if calls["n"] <= times:
            error = {
                "Error": {"Code": code, "Message": message},
                "ResponseMetadata": {"RetryAttempts": retry_attempts},
            }
            raise ClientError(error, model.name)  # type: ignore[arg-type]

    hook.calls = calls  # type: ignore[attr-defined]
    return hook


@pytest.fixture
def paged_moto(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Make moto's GetQueryResults page like Athena's; returns the (MaxResults, NextToken) of each call."""
    calls: list[dict[str, Any]] = []

    def get_query_results(self: AthenaResponse) -> str:
        max_results = int(self._get_param("MaxResults") or 1000)
        token = self._get_param("NextToken")
        calls.append({"MaxResults": max_results, "NextToken": token})
        assert 1 <= max_results <= 1000, "Athena rejects MaxResults above 1000"
        start = int(token or 0)
        result = self.athena_backend.get_query_results(self._get_param("QueryExecutionId")).to_dict()
        rows = result["ResultSet"]["Rows"]
        result["ResultSet"]["Rows"] = rows[start : start + max_results]
        if start + max_results < len(rows):
            result["NextToken"] = str(start + max_results)
        return json.dumps(result)

    monkeypatch.setattr(AthenaResponse, "get_query_results", get_query_results)
    return calls


@pytest.fixture
def athena(paged_moto: list[dict[str, Any]]) -> Iterator[Athena]:
    with mock_aws():
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        client = boto3.client("athena", region_name=REGION)
        client.create_work_group(
            Name=WORKGROUP,
            Configuration={
                "ResultConfiguration": {"OutputLocation": f"s3://{BUCKET}/results/"},
                "EnforceWorkGroupConfiguration": True,
            },
        )
        backend = athena_backends[DEFAULT_ACCOUNT_ID][REGION]
        try:
            yield Athena(client, backend, FakeTime(), paged_moto)
        finally:
            state_manager.unset_transition(model_name="athena::execution")


def only_execution(athena: Athena) -> Any:
    executions = list(athena.backend.executions.values())
    assert len(executions) == 1
    return executions[0]


# -- results ------------------------------------------------------------------------------------


def test_pages_through_every_row_once_and_drops_the_header(athena: Athena) -> None:
    athena.inject([("n", "integer"), ("label", "varchar")], [[str(i), f"row-{i}"] for i in range(2500)])

    def scanned(parsed: dict[str, Any], **_: Any) -> None:
        parsed["QueryExecution"]["Statistics"]["DataScannedInBytes"] = 12_345_678

    athena.hook("after-call.athena.GetQueryExecution", scanned)

    result = athena.engine().run("SELECT n, label FROM ops")

    assert [c.name for c in result.columns] == ["n", "label"]
    assert [c.type for c in result.columns] == ["integer", "varchar"]
    assert [row[0] for row in result.rows] == list(range(2500))
    assert result.rows[0] == (0, "row-0")
    assert result.rows[-1] == (2499, "row-2499")
    assert ("n", "label") not in result.rows
    assert [c["MaxResults"] for c in athena.pages] == [1000, 1000, 1000]
    assert [c["NextToken"] for c in athena.pages] == [None, "1000", "2000"]
    assert result.engine == "athena"
    assert result.bytes_scanned == 12_345_678
    assert result.files_read is None

    execution = only_execution(athena)
    assert result.query_id == execution.id
    assert execution.query == "SELECT n, label FROM ops"
    assert execution.context == {"Database": DATABASE}
    assert execution.workgroup.name == WORKGROUP


def test_a_select_without_rows_has_columns_and_no_rows(athena: Athena) -> None:
    athena.inject([("n", "bigint")], [])

    result = athena.engine().run("SELECT n FROM ops WHERE false")

    assert [c.name for c in result.columns] == ["n"]
    assert result.rows == []
    assert result.records() == []


def test_a_first_row_unlike_the_labels_is_data(athena: Athena) -> None:
    """Statements whose results have no header row (e.g. SHOW) keep their first row."""
    info = [{"Name": "tab_name", "Label": "tab_name", "Type": "string"}]
    athena.backend.query_results_queue.append(
        QueryResults(rows=[{"Data": [{"VarCharValue": "ops"}]}], column_info=info)
    )

    assert athena.engine().run("SHOW TABLES").rows == [("ops",)]


def test_moto_without_injected_results_gives_an_empty_result(athena: Athena) -> None:
    result = athena.engine().run("SELECT 1")

    assert (result.columns, result.rows) == ([], [])


PLUS_0530 = dt.timezone(dt.timedelta(hours=5, minutes=30))

#: (column, Athena type, [(Athena's text, expected Python value), ...]) for two data rows.
TYPED: list[tuple[str, str, list[tuple[str, Any]]]] = [
    ("s", "varchar", [('héllo, "world"', 'héllo, "world"'), ("", "")]),
    ("c", "char", [("ab", "ab"), ("", "")]),
    ("st", "string", [("text", "text"), ("", "")]),
    ("i", "integer", [("-42", -42), ("0", 0)]),
    ("b", "bigint", [("9007199254740993", 9007199254740993), ("0", 0)]),
    ("sm", "smallint", [("7", 7), ("-32768", -32768)]),
    ("ti", "tinyint", [("-3", -3), ("127", 127)]),
    ("d", "double", [("1.5E10", 1.5e10), ("Infinity", float("inf"))]),
    ("f", "float", [("0.25", 0.25), ("-0.0", -0.0)]),
    ("r", "real", [("-2.5", -2.5), ("1.0E-5", 1e-5)]),
    ("dec", "decimal", [("12345678901234567890.123456789", Decimal("12345678901234567890.123456789")),
                        ("0.00", Decimal("0.00"))]),
    ("ok", "boolean", [("true", True), ("false", False)]),
    ("day", "date", [("2026-11-21", dt.date(2026, 11, 21)), ("1970-01-01", dt.date(1970, 1, 1))]),
    ("ts", "timestamp", [("2026-11-21 10:15:00.123", dt.datetime(2026, 11, 21, 10, 15, 0, 123000)),
                         ("2026-01-02 03:04:05", dt.datetime(2026, 1, 2, 3, 4, 5))]),
    ("tstz", "timestamp with time zone", [
        ("2026-11-21 10:15:00.123 UTC", dt.datetime(2026, 11, 21, 10, 15, 0, 123000, tzinfo=dt.UTC)),
        ("2026-01-02 03:04:05.5 +05:30", dt.datetime(2026, 1, 2, 3, 4, 5, 500000, tzinfo=PLUS_0530)),
    ]),
    ("arr", "array", [("[a, b]", "[a, b]"), ("[]", "[]")]),
    ("m", "map", [("{k=1}", "{k=1}"), ("{}", "{}")]),
    ("row_", "row", [("{x=1, y=abc}", "{x=1, y=abc}"), ("{x=null}", "{x=null}")]),
    ("j", "json", [('{"a":[1,2]}', '{"a":[1,2]}'), ("null", "null")]),
]  # fmt: skip


def test_values_are_converted_by_column_type_and_nulls_are_none(athena: Athena) -> None:
    columns = [(name, type_) for name, type_, _ in TYPED]
    texts: list[list[str | None]] = [[samples[i][0] for _, _, samples in TYPED] for i in range(2)]
    athena.inject(columns, [*texts, [None] * len(TYPED)])

    first, second, nulls = athena.engine().run("SELECT * FROM typed").rows

    for i, row in enumerate((first, second)):
        for (name, type_, samples), value in zip(TYPED, row, strict=True):
            expected = samples[i][1]
            assert (name, value) == (name, expected)
            assert type(value) is type(expected), f"{name} ({type_}): {type(value).__name__}"
    assert first[13].tzinfo is None  # naive: Athena's timestamps are UTC without a zone
    assert first[14].tzinfo is dt.UTC
    assert second[14].utcoffset() == dt.timedelta(hours=5, minutes=30)
    assert nulls == (None,) * len(TYPED)


def test_nan_is_a_float(athena: Athena) -> None:
    athena.inject([("d", "double")], [["NaN"]])

    [(value,)] = athena.engine().run("SELECT nan()").rows

    assert isinstance(value, float)
    assert value != value


def test_timestamps_keep_microseconds_and_named_zones() -> None:
    ts, tstz = converter_for("timestamp(6)"), converter_for("timestamp(3) with time zone")

    assert ts("2026-11-21 10:15:00.123456789") == dt.datetime(2026, 11, 21, 10, 15, 0, 123456)
    value = tstz("2026-07-01 12:00:00.000 Europe/Paris")
    assert value.utcoffset() == dt.timedelta(hours=2)
    assert converter_for("decimal(10,2)")("1.10") == Decimal("1.10")
    assert converter_for("array(varchar)")("[a]") == "[a]"


def test_a_value_that_does_not_match_its_type_is_a_clear_error(athena: Athena) -> None:
    athena.inject([("n", "integer")], [["not a number"]])

    with pytest.raises(QueryError, match="'not a number' of column 'n' as integer"):
        athena.engine().run("SELECT n FROM ops")


# -- states -------------------------------------------------------------------------------------


def test_polls_through_queued_and_running_with_capped_backoff(athena: Athena) -> None:
    state_manager.set_transition(
        model_name="athena::execution", transition={"progression": "manual", "times": 4}
    )
    athena.inject([("n", "integer")], [["1"]])
    gets = fail_calls("unused", times=0)
    athena.hook("before-call.athena.GetQueryExecution", gets)

    result = athena.engine(poll_initial_s=0.2, poll_max_s=2.0).run("SELECT 1")

    assert result.rows == [(1,)]
    assert gets.calls["n"] == 8  # type: ignore[attr-defined]  # 4 describes per transition, 2 transitions
    assert athena.time.sleeps == pytest.approx([0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0])
    assert only_execution(athena).status == "SUCCEEDED"


def test_failed_query_raises_with_athenas_reason(athena: Athena) -> None:
    reason = "COLUMN_NOT_FOUND: line 1:8: Column 'nope' cannot be resolved"
    athena.set_state_after_start("FAILED", reason=reason, error=reason)

    with pytest.raises(QueryFailedError) as caught:
        athena.engine().run("SELECT nope FROM ops")

    error = caught.value
    assert error.state == "FAILED"
    assert error.query_id == only_execution(athena).id
    assert reason in error.message
    assert error.message.count("COLUMN_NOT_FOUND") == 1
    assert athena.pages == []


def test_failed_query_carries_both_reason_and_athena_error_when_they_differ(athena: Athena) -> None:
    athena.set_state_after_start("FAILED", reason="Query exhausted resources", error="Try a smaller range")

    with pytest.raises(QueryFailedError, match="Query exhausted resources; Try a smaller range"):
        athena.engine().run("SELECT * FROM ops")


def test_cancelled_query_raises_with_its_state(athena: Athena) -> None:
    athena.set_state_after_start("CANCELLED")

    with pytest.raises(QueryFailedError, match="cancelled") as caught:
        athena.engine().run("SELECT * FROM ops")

    assert caught.value.state == "CANCELLED"
    assert caught.value.query_id == only_execution(athena).id


def test_timeout_stops_the_query(athena: Athena) -> None:
    state_manager.set_transition(
        model_name="athena::execution", transition={"progression": "manual", "times": 10_000}
    )

    with pytest.raises(QueryTimeoutError) as caught:
        athena.engine(poll_max_s=2.0).run("SELECT * FROM ops", timeout_s=5)

    execution = only_execution(athena)
    assert execution.status == "CANCELLED"
    assert caught.value.query_id == execution.id
    assert execution.id in caught.value.message
    assert "5 s" in caught.value.message
    assert sum(athena.time.sleeps) == pytest.approx(5.0)
    assert max(athena.time.sleeps) <= 2.0
    assert athena.pages == []


# -- refused calls and throttling ---------------------------------------------------------------


def test_a_refused_query_raises_athenas_message_without_retrying(athena: Athena) -> None:
    message = "line 1:1: mismatched input 'SELEC'. Expecting: 'ALTER', 'ANALYZE', 'SELECT'"
    refuse = fail_calls("InvalidRequestException", times=1, message=message)
    athena.hook("before-call.athena.StartQueryExecution", refuse)

    with pytest.raises(QueryFailedError, match="mismatched input 'SELEC'"):
        athena.engine().run("SELEC 1")

    assert refuse.calls["n"] == 1  # type: ignore[attr-defined]
    assert athena.backend.executions == {}


def test_an_unknown_workgroup_is_refused_by_athena(athena: Athena) -> None:
    with pytest.raises(QueryFailedError, match="WorkGroup does not exist"):
        athena.engine(workgroup="no-such-workgroup").run("SELECT 1")


@pytest.mark.parametrize("operation", ["StartQueryExecution", "GetQueryExecution", "GetQueryResults"])
def test_throttling_left_after_botocores_retries_is_reported_at_once(athena: Athena, operation: str) -> None:
    athena.inject([("n", "integer")], [["1"], ["2"]])
    throttle = fail_calls("ThrottlingException", times=100, retry_attempts=2)
    athena.hook(f"before-call.athena.{operation}", throttle)

    with pytest.raises(QueryError, match="throttling") as caught:
        athena.engine().run("SELECT n FROM ops")

    assert type(caught.value) is QueryError  # not QueryFailedError: the API answers 503 sql_throttled
    assert "(ThrottlingException on " in caught.value.message and "3 attempts" in caught.value.message
    assert throttle.calls["n"] == 1  # type: ignore[attr-defined]  # no retries on top of botocore's
    assert athena.time.sleeps == []
    assert len(athena.backend.executions) == (0 if operation == "StartQueryExecution" else 1)


def athena_throttles_starts(monkeypatch: pytest.MonkeyPatch, times: int) -> dict[str, int]:
    """Make moto answer the first ``times`` StartQueryExecution requests with Athena's throttling
    error (HTTP 400 ThrottlingException), as the service does; the count is of every request."""
    requests = {"n": 0}
    start = AthenaResponse.start_query_execution

    def throttled(self: AthenaResponse) -> Any:
        requests["n"] += 1
        if requests["n"] <= times:
            raise JsonRESTError("ThrottlingException", "Rate exceeded")
        return start(self)

    monkeypatch.setattr(AthenaResponse, "start_query_execution", throttled)
    return requests


@pytest.mark.parametrize(("throttled", "attempts"), [(2, 3), (100, 3)])
def test_the_factorys_client_has_standard_retries_that_absorb_throttling(
    athena: Athena, monkeypatch: pytest.MonkeyPatch, throttled: int, attempts: int
) -> None:
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)  # botocore's default: 3 attempts a call
    monkeypatch.setattr(standard_retries.ExponentialBackoff, "delay_amount", lambda self, context: 0.0)
    athena.inject([("n", "integer")], [["5"]])
    engine = create_engine(
        Settings(query_engine="athena", athena_workgroup=WORKGROUP, glue_database=DATABASE)
    )
    assert isinstance(engine, AthenaEngine)
    client = engine._client
    assert client.meta.config.retries["mode"] == "standard"
    requests = athena_throttles_starts(monkeypatch, throttled)

    if throttled < attempts:
        assert engine.run("SELECT 5").rows == [(5,)]
    else:
        with pytest.raises(
            QueryError,
            match=rf"\(ThrottlingException on start_query_execution, {attempts} attempts\)",
        ):
            engine.run("SELECT 5")
    assert requests["n"] == min(throttled + 1, attempts)  # every attempt is botocore's
    assert len(athena.backend.executions) == (1 if throttled < attempts else 0)


# -- the factory --------------------------------------------------------------------------------


def test_factory_builds_an_athena_engine_that_runs_in_the_workgroup(athena: Athena) -> None:
    settings = Settings(query_engine="athena", athena_workgroup=WORKGROUP, glue_database=DATABASE)
    athena.inject([("n", "integer")], [["3"]])

    engine = create_engine(settings, athena_client=athena.client)

    assert isinstance(engine, AthenaEngine)
    assert engine.run("SELECT 3").rows == [(3,)]
    execution = only_execution(athena)
    assert (execution.workgroup.name, execution.context) == (WORKGROUP, {"Database": DATABASE})


def test_factory_requires_the_athena_workgroup() -> None:
    with pytest.raises(ConfigurationError, match="OPSLAKE_ATHENA_WORKGROUP"):
        create_engine(Settings(query_engine="athena"), athena_client=object())


def test_factory_builds_the_embedded_engine_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[tuple[Settings, Any]] = []

    class FakeEmbeddedEngine:
        @classmethod
        def from_settings(cls, settings: Settings, *, glue_client: Any = None) -> FakeEmbeddedEngine:
            built.append((settings, glue_client))
            return cls()

    module = types.ModuleType("opslake.query.embedded")
    module.EmbeddedEngine = FakeEmbeddedEngine  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "opslake.query.embedded", module)
    settings, glue = Settings(query_engine="embedded"), object()

    engine = create_engine(settings, glue_client=glue)

    assert isinstance(engine, FakeEmbeddedEngine)
    assert built == [(settings, glue)]
