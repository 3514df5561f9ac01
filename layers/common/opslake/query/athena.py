"""The Athena engine: start a query in the workgroup, poll it to the end, page through its rows.

Runs in gateway Lambdas, so it needs only a boto3 client (no pyarrow): Athena's text values are
converted to Python values by each column's type. Timestamps: the lake stores UTC, and Athena
returns ``timestamp`` values without a zone, so they come back as *naive* datetimes that mean UTC;
``timestamp with time zone`` values come back as aware datetimes.

Throttled and transient calls are retried by botocore itself (the client's standard retry mode, see
:func:`opslake.runtime.boto_config`); a call that still fails after those retries is reported at once.
Polling a running query for its state is not a retry: it is how the engine waits.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from decimal import Decimal, InvalidOperation
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from opslake.query.base import (
    Column,
    QueryEngine,
    QueryError,
    QueryFailedError,
    QueryResult,
    QueryTimeoutError,
)

#: States after which an execution never changes.
TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
#: Error codes Athena uses when a caller exceeds its API rate (botocore has retried them already).
THROTTLING_CODES = frozenset({"TooManyRequestsException", "ThrottlingException"})
#: The largest page GetQueryResults returns.
PAGE_SIZE = 1000

Converter = Callable[[str], Any]


class AthenaEngine(QueryEngine):
    """Runs one statement in an Athena workgroup and returns all its rows, typed.

    The workgroup enforces the result location (and the bytes-scanned cutoff), so the engine sends
    none. ``sleep`` and ``clock`` are injectable so tests drive polling and timeouts without waiting.
    ``client`` should be built with :func:`opslake.runtime.boto_config` (the factory does): its retries
    are the only ones.
    """

    name = "athena"

    def __init__(
        self,
        client: Any,
        *,
        workgroup: str,
        database: str,
        poll_initial_s: float = 0.2,
        poll_max_s: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._workgroup = workgroup
        self._database = database
        self._poll_initial_s = poll_initial_s
        self._poll_max_s = poll_max_s
        self._sleep = sleep
        self._clock = clock

    def run(self, sql: str, *, timeout_s: float = 60.0) -> QueryResult:
        """Run ``sql`` to completion; raise QueryFailedError, QueryTimeoutError or QueryError."""
        deadline = self._clock() + timeout_s
        query_id = self._start(sql)
        execution = self._wait(query_id, deadline=deadline, timeout_s=timeout_s)
        columns, rows = self._fetch_rows(query_id)
        scanned = execution.get("Statistics", {}).get("DataScannedInBytes")
        return QueryResult(
            columns=columns,
            rows=rows,
            engine=self.name,
            query_id=query_id,
            bytes_scanned=int(scanned) if scanned is not None else None,
            files_read=None,
        )

    # -- the three phases -------------------------------------------------------------------

    def _start(self, sql: str) -> str:
        """Start the query; the same ClientRequestToken on botocore's retries keeps the start idempotent."""
        response = self._call(
            "start_query_execution",
            QueryString=sql,
            QueryExecutionContext={"Database": self._database},
            WorkGroup=self._workgroup,
            ClientRequestToken=uuid.uuid4().hex,
        )
        return str(response["QueryExecutionId"])

    def _wait(self, query_id: str, *, deadline: float, timeout_s: float) -> dict[str, Any]:
        """Poll with capped exponential backoff until a terminal state; stop the query at the deadline."""
        delay = self._poll_initial_s
        while True:
            execution: dict[str, Any] = self._call(
                "get_query_execution", query_id=query_id, QueryExecutionId=query_id
            )["QueryExecution"]
            state = execution.get("Status", {}).get("State", "")
            if state == "SUCCEEDED":
                return execution
            if state in TERMINAL_STATES:
                raise _failure(query_id, execution)
            remaining = deadline - self._clock()
            if remaining <= 0:
                self._stop(query_id)
                raise QueryTimeoutError(
                    f"Athena query {query_id} did not finish within {timeout_s:g} s and was cancelled; "
                    "narrow the time range or add filters on partition columns",
                    query_id=query_id,
                )
            self._sleep(min(delay, remaining))
            delay = min(delay * 2, self._poll_max_s)

    def _fetch_rows(self, query_id: str) -> tuple[list[Column], list[tuple[Any, ...]]]:
        """Page through GetQueryResults; drop the header row Athena puts first in a SELECT's results."""
        columns: list[Column] = []
        converters: list[Converter] = []
        rows: list[tuple[Any, ...]] = []
        token: str | None = None
        first_page = True
        while True:
            kwargs: dict[str, Any] = {"QueryExecutionId": query_id, "MaxResults": PAGE_SIZE}
            if token:
                kwargs["NextToken"] = token
            page = self._call("get_query_results", query_id=query_id, **kwargs)
            result_set = page.get("ResultSet", {})
            raw_rows = result_set.get("Rows", [])
            if first_page:
                info = result_set.get("ResultSetMetadata", {}).get("ColumnInfo", [])
                columns = [
                    Column(name=c.get("Name") or c.get("Label", ""), type=c.get("Type", "")) for c in info
                ]
                converters = [converter_for(c.type) for c in columns]
                if raw_rows and _is_header(raw_rows[0], info):
                    raw_rows = raw_rows[1:]
                first_page = False
            rows.extend(_convert_row(raw, columns, converters, query_id) for raw in raw_rows)
            token = page.get("NextToken")
            if not token:
                return columns, rows

    # -- AWS calls --------------------------------------------------------------------------

    def _call(self, operation: str, *, query_id: str | None = None, **kwargs: Any) -> dict[str, Any]:
        """Call an Athena operation once (botocore retries throttling and transient errors inside it)
        and turn what it raises into the engine's errors."""
        try:
            response: dict[str, Any] = getattr(self._client, operation)(**kwargs)
            return response
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in THROTTLING_CODES:
                attempts = int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0)) + 1
                raise QueryError(
                    f"Athena is throttling requests ({code} on {operation}, {attempts} attempts); "
                    "too many queries are running: retry in a few seconds",
                    query_id=query_id,
                ) from exc
            raise QueryFailedError(_client_error_message(exc), state="FAILED", query_id=query_id) from exc
        except BotoCoreError as exc:
            raise QueryError(f"Athena could not be reached ({operation}): {exc}", query_id=query_id) from exc

    def _stop(self, query_id: str) -> None:
        """Cancel a query we stopped waiting for (best effort: the timeout is reported either way)."""
        with contextlib.suppress(QueryError):
            self._call("stop_query_execution", query_id=query_id, QueryExecutionId=query_id)


# -- failures -----------------------------------------------------------------------------------


def _failure(query_id: str, execution: dict[str, Any]) -> QueryFailedError:
    """A QueryFailedError carrying Athena's reason for a FAILED or CANCELLED execution."""
    status = execution.get("Status", {})
    state = str(status.get("State", "FAILED"))
    reason = str(status.get("StateChangeReason") or "").strip()
    detail = str(status.get("AthenaError", {}).get("ErrorMessage") or "").strip()
    parts = [p for p in (reason, detail) if p]
    if len(parts) == 2 and (detail in reason or reason in detail):
        parts = [max(parts, key=len)]
    verb = "was cancelled" if state == "CANCELLED" else "failed"
    explanation = ": " + "; ".join(parts) if parts else " (Athena gave no reason)"
    return QueryFailedError(f"Athena query {verb}{explanation}", state=state, query_id=query_id)


def _client_error_message(exc: ClientError) -> str:
    """Athena's own words for a refused call (e.g. a syntax error raised by StartQueryExecution)."""
    error = exc.response.get("Error", {})
    message = error.get("Message") or str(exc)
    return f"Athena refused the query: {message}"


# -- rows and values ----------------------------------------------------------------------------


def _is_header(raw: dict[str, Any], column_info: list[dict[str, Any]]) -> bool:
    """True when a row repeats the column labels (Athena's first row of a SELECT's results)."""
    values = [cell.get("VarCharValue") for cell in raw.get("Data", [])]
    labels = [c.get("Label") or c.get("Name") for c in column_info]
    return bool(labels) and values == labels


def _convert_row(
    raw: dict[str, Any], columns: list[Column], converters: list[Converter], query_id: str
) -> tuple[Any, ...]:
    """One Athena row as a tuple of Python values; a cell without VarCharValue is NULL (None)."""
    cells = raw.get("Data", [])
    if len(cells) != len(columns):
        raise QueryError(
            f"Athena returned a row of {len(cells)} values for {len(columns)} columns", query_id=query_id
        )
    values: list[Any] = []
    for cell, column, convert in zip(cells, columns, converters, strict=True):
        text = cell.get("VarCharValue")
        if text is None:
            values.append(None)
            continue
        try:
            values.append(convert(text))
        except (ValueError, KeyError, InvalidOperation) as exc:
            raise QueryError(
                f"cannot read Athena value {text!r} of column {column.name!r} as {column.type}",
                query_id=query_id,
            ) from exc
    return tuple(values)


def base_type(athena_type: str) -> str:
    """The type's name without parameters: ``decimal(10,2)`` → ``decimal``, ``array(varchar)`` → ``array``."""
    text = athena_type.strip().lower()
    head = text.split("(", 1)[0].strip()
    if head == "timestamp" and text.endswith("with time zone"):
        return "timestamp with time zone"
    return head


def _as_bool(text: str) -> bool:
    return {"true": True, "false": False}[text.strip().lower()]


def converter_for(athena_type: str) -> Converter:
    """How to turn Athena's text for a column type into a Python value; unknown types stay text."""
    return _CONVERTERS.get(base_type(athena_type), str)


# "2026-11-21 10:15:00.123", optionally followed by a zone ("UTC", "+01:00", "Europe/Paris").
_TIMESTAMP = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})[ T](?P<time>\d{2}:\d{2}(?::\d{2})?)(?:\.(?P<frac>\d+))?"
    r"(?:\s*(?P<zone>\S+))?$"
)
_OFFSET = re.compile(r"^(?P<sign>[+-])(?P<h>\d{2}):?(?P<m>\d{2})$")


def _split_timestamp(text: str) -> tuple[datetime, str | None]:
    """The naive datetime and the zone text (if any) of an Athena timestamp; sub-µs digits dropped."""
    match = _TIMESTAMP.match(text.strip())
    if not match:
        raise ValueError(f"not an Athena timestamp: {text!r}")
    micros = (match["frac"] or "").ljust(6, "0")[:6]
    naive = datetime.fromisoformat(f"{match['date']} {match['time']}").replace(microsecond=int(micros))
    return naive, match["zone"]


def parse_timestamp(text: str) -> datetime:
    """An Athena ``timestamp`` as a naive datetime (the lake's timestamps are UTC)."""
    naive, zone = _split_timestamp(text)
    if zone is not None:
        raise ValueError(f"unexpected zone in a timestamp without time zone: {text!r}")
    return naive


def parse_timestamp_tz(text: str) -> datetime:
    """An Athena ``timestamp with time zone`` as an aware datetime."""
    naive, zone = _split_timestamp(text)
    if zone is None:
        raise ValueError(f"missing zone in a timestamp with time zone: {text!r}")
    return naive.replace(tzinfo=_zone(zone))


def _zone(name: str) -> tzinfo:
    """UTC, a fixed offset, or an IANA zone (the last needs the system's or tzdata's zone files)."""
    if name.upper() in ("UTC", "Z", "GMT"):
        return UTC
    offset = _OFFSET.match(name)
    if offset:
        delta = timedelta(hours=int(offset["h"]), minutes=int(offset["m"]))
        return timezone(-delta if offset["sign"] == "-" else delta)
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r}") from exc


_CONVERTERS: dict[str, Converter] = {
    "varchar": str,
    "char": str,
    "string": str,
    "tinyint": int,
    "smallint": int,
    "integer": int,
    "int": int,
    "bigint": int,
    "double": float,
    "float": float,
    "real": float,
    "decimal": Decimal,
    "boolean": _as_bool,
    "date": date.fromisoformat,
    "timestamp": parse_timestamp,
    "timestamp with time zone": parse_timestamp_tz,
}
