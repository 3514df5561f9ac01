"""The data tools agents call: describe the allowlisted tables, read one worker, match workers.

Plain logic over interfaces (a Glue client, a :class:`QueryEngine`); the handlers in
functions/gateway/ only adapt HTTP to these functions. SQL is built from validated values only:
worker ids must match ``W`` + five digits, every text filter is a literal with its quotes doubled
(:func:`opslake.query.sqltext.sql_string`), table names are checked identifiers. Array columns are
read as ``array_join(..., '|')`` so Athena (which returns arrays as ambiguous text) and the
embedded engine answer identically.
"""

from __future__ import annotations

import re
import threading
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, Literal

from cachetools import TTLCache
from pydantic import BaseModel, ConfigDict, Field

from opslake.datasets.staffing import AVAILABILITY, PLACEMENTS, WORKERS
from opslake.errors import BadGatewayError, BadRequestError, NotFoundError, ServiceUnavailableError
from opslake.http.bodies import parse_body
from opslake.query.api import ApiQueryConfig, run_query
from opslake.query.base import QueryEngine
from opslake.query.sqltext import sql_string
from opslake.tools import matching

if TYPE_CHECKING:
    from opslake.config import Settings

WORKER_ID = re.compile(r"^W[0-9]{5}$")
#: How many candidates the structured filters may pass to the scorer.
CANDIDATE_LIMIT = 300
MAX_MATCHES = 50
#: Glue table descriptions are served from the container's cache for this long.
TABLES_CACHE_TTL_S = 60.0
_DESCRIPTION_CHARS = 200
_WORKER_COLUMNS = (
    "worker_id", "name", "role", "city", "state", "skills", "certifications", "availability",
    "years_experience", "rating", "hourly_rate",
)  # fmt: skip
_LIST_COLUMNS = ("skills", "certifications")


# ---- GET /tables, GET /tables/{name} ------------------------------------------------------------
class TableColumn(BaseModel):
    name: str
    type: str


class TableInfo(BaseModel):
    name: str
    description: str
    columns: list[TableColumn]
    partition_keys: list[TableColumn]
    location: str | None = None


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _DESCRIPTION_CHARS else line[: _DESCRIPTION_CHARS - 1] + "…"


def table_info(table: dict[str, Any]) -> TableInfo:
    """A Glue ``Table`` as the tools describe it: columns, partition keys, a one-line description."""
    parameters = table.get("Parameters") or {}
    description = table.get("Description") or parameters.get("comment") or parameters.get("description") or ""
    descriptor = table.get("StorageDescriptor") or {}
    return TableInfo(
        name=table["Name"],
        description=_one_line(str(description)),
        columns=[TableColumn(name=c["Name"], type=c["Type"]) for c in descriptor.get("Columns", [])],
        partition_keys=[
            TableColumn(name=k["Name"], type=k.get("Type", "string")) for k in table.get("PartitionKeys", [])
        ],
        location=descriptor.get("Location"),
    )


#: Glue's error codes for a failure that passes (throttling, its own faults, its own timeout).
GLUE_TRANSIENT_CODES = frozenset(
    {
        "ThrottlingException",
        "TooManyRequestsException",
        "InternalServiceException",
        "OperationTimeoutException",
    }
)


class CatalogUnavailableError(ServiceUnavailableError):
    code = "catalog_unavailable"


class CatalogFailedError(BadGatewayError):
    code = "catalog_failed"


class TableCatalog:
    """The allowlisted tables as Glue describes them, cached briefly per container.

    Only allowlisted names are ever looked up (one ``GetTable`` each), so the role needs no
    ``GetTables`` and an agent can never learn of a table outside the allowlist.
    """

    def __init__(
        self,
        glue: Any,
        database: str,
        allowed: list[str],
        cache: MutableMapping[str, dict[str, TableInfo]] | None = None,
        *,
        retry_after_s: int = 5,
    ) -> None:
        self._glue = glue
        self.database = database
        self.allowed = list(allowed)
        self.retry_after_s = retry_after_s
        self._cache = cache if cache is not None else TTLCache(maxsize=1, ttl=TABLES_CACHE_TTL_S)
        self._lock = threading.Lock()  # cachetools' caches are not thread-safe (the local stack's are)

    @classmethod
    def from_settings(cls, glue: Any, settings: Settings) -> TableCatalog:
        """The catalog a tool reads: the lake's database, the allowlist, the 503s' Retry-After."""
        return cls(
            glue, settings.glue_database, settings.allowed_tables, retry_after_s=settings.queue_retry_after_s
        )

    def tables(self) -> dict[str, TableInfo]:
        """Every allowlisted table that exists in Glue, in allowlist order."""
        with self._lock:
            hit = self._cache.get(self.database)
        if hit is not None:
            return hit
        found: dict[str, TableInfo] = {}
        for name in self.allowed:
            try:
                table = self._glue.get_table(DatabaseName=self.database, Name=name)["Table"]
            except self._glue.exceptions.EntityNotFoundException as exc:
                # Glue says so for a missing database too ("Database x not found."): every table
                # would be skipped and a misconfigured database read as an empty catalog.
                if str(exc.response.get("Error", {}).get("Message", "")).startswith("Database "):
                    raise CatalogFailedError(
                        f"the table catalog (Glue) has no database {self.database!r}: {exc}"[:500]
                    ) from exc
                continue
            except Exception as exc:
                raise self._catalog_error(exc) from exc
            found[name] = table_info(table)
        with self._lock:
            self._cache[self.database] = found
        return found

    def _catalog_error(self, exc: Exception) -> Exception:
        """Glue's failure as an answer (botocore has spent its retries): throttling, Glue's own errors
        and an unreachable endpoint are a 503 with ``Retry-After``; anything else it refused (a
        permission, a missing database) a 502 naming the error. Other exceptions stay what they are."""
        from botocore.exceptions import BotoCoreError, ClientError  # loaded with the client anyway

        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            if code in GLUE_TRANSIENT_CODES:
                return CatalogUnavailableError(
                    f"the table catalog (Glue) is not answering right now ({code}); retry shortly",
                    retry_after_s=self.retry_after_s,
                )
            return CatalogFailedError(f"the table catalog (Glue) refused the read: {code}: {exc}"[:500])
        if isinstance(exc, BotoCoreError):
            return CatalogUnavailableError(
                f"the table catalog (Glue) could not be reached ({type(exc).__name__}); retry shortly",
                retry_after_s=self.retry_after_s,
            )
        return exc

    def table(self, name: str) -> TableInfo:
        """One table; 404 listing the available ones when it is not allowlisted or not in Glue."""
        tables = self.tables()
        info = tables.get(name) if name in self.allowed else None
        if info is None:
            shown = name if len(name) <= 60 else name[:60] + "…"
            raise NotFoundError(
                f"no table {shown!r}; available tables: {', '.join(tables) or '(none)'}",
                detail={"table": shown, "available": list(tables)},
            )
        return info


# ---- GET /worker/{id} ---------------------------------------------------------------------------
def validate_worker_id(raw: str | None) -> str:
    """A worker id: ``W`` and five digits (``W00042``); anything else is a 400."""
    if raw is None or not WORKER_ID.fullmatch(raw):  # whole: "$" alone would accept "W00042\n"
        shown = (raw or "")[:40]
        raise BadRequestError(
            f"worker id must be W followed by five digits, e.g. W00042 (got {shown!r})",
            detail={"parameter": "id", "pattern": WORKER_ID.pattern},
        )
    return raw


def _table(config: ApiQueryConfig, name: str) -> str:
    ApiQueryConfig(database=config.database, table=name)  # checks the identifier
    return f'"{config.database}"."{name}"'


def _worker_select(alias: str = "w") -> str:
    return ", ".join(
        f"array_join({alias}.{c}, '|') AS {c}" if c in _LIST_COLUMNS else f"{alias}.{c}"
        for c in _WORKER_COLUMNS
    )


def worker_sql(config: ApiQueryConfig, worker_id: str) -> str:
    """One worker and the number of their placements, in one query."""
    worker_id = validate_worker_id(worker_id)
    literal = sql_string(worker_id)
    return (
        f"SELECT {_worker_select()},\n"
        f"  (SELECT count(*) FROM {_table(config, PLACEMENTS)} p WHERE p.worker_id = {literal}) AS placements\n"
        f"FROM {_table(config, WORKERS)} w\nWHERE w.worker_id = {literal}"
    )


def _worker_record(row: dict[str, Any]) -> dict[str, Any]:
    record = {c: row[c] for c in _WORKER_COLUMNS}
    for column in _LIST_COLUMNS:
        record[column] = [v for v in str(record[column] or "").split("|") if v]
    record["rating"] = float(record["rating"])
    record["hourly_rate"] = float(record["hourly_rate"])
    record["years_experience"] = int(record["years_experience"])
    return record


def get_worker(engine: QueryEngine, config: ApiQueryConfig, worker_id: str | None) -> dict[str, Any]:
    """``GET /worker/{id}``: the worker's record plus ``placements`` (count); 404 when unknown."""
    wid = validate_worker_id(worker_id)
    result = run_query(engine, worker_sql(config, wid), what=f"worker {wid}", config=config)
    rows = result.records()
    if not rows:
        raise NotFoundError(f"no worker with id {wid!r}", detail={"worker_id": wid})
    record = _worker_record(rows[0])
    record["placements"] = int(rows[0]["placements"] or 0)
    return {"worker": record, "engine": result.engine}


# ---- POST /match --------------------------------------------------------------------------------
Availability = Literal["immediate", "1_week", "2_weeks", "unavailable"]
assert set(Availability.__args__) == set(AVAILABILITY)  # type: ignore[attr-defined]


class MatchRequest(BaseModel):
    """The body of ``POST /match``. ``role`` and one of ``city``/``state`` are required (checked
    together so that one 400 names everything missing)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    role: str | None = Field(default=None, min_length=1, max_length=100)
    city: str | None = Field(default=None, min_length=1, max_length=100)
    state: str | None = Field(default=None, min_length=2, max_length=2, pattern=r"^[A-Za-z]{2}$")
    availability: Availability | None = None
    min_rating: float | None = Field(default=None, ge=1.0, le=5.0)
    count: int = Field(default=5, ge=1, le=MAX_MATCHES)
    need: str = Field(min_length=1, max_length=2000)


class WorkerMatch(BaseModel):
    worker_id: str
    name: str
    role: str
    city: str
    state: str
    availability: str
    rating: float
    hourly_rate: float
    years_experience: int
    skills: list[str]
    certifications: list[str]
    score: float
    matched_terms: list[str]
    matched_skills: list[str]
    matched_certifications: list[str]


class MatchAnswer(BaseModel):
    matches: list[WorkerMatch]
    need_terms: list[str]
    candidates_before_ranking: int
    candidate_limit: int
    returned: int
    engine: str


def parse_match_request(body: str | None) -> MatchRequest:
    """The request body as a :class:`MatchRequest`; a 400 listing each bad field otherwise
    (parsed in the route so that a refused body is observed too: see :mod:`opslake.http.bodies`)."""
    return parse_body(MatchRequest, body)


def check_match_request(request: MatchRequest) -> list[str]:
    """The need's terms, after checking the required filters (400 naming what is missing)."""
    missing = []
    if not request.role:
        missing.append("role")
    if not request.city and not request.state:
        missing.append("city or state")
    if missing:
        raise BadRequestError(
            f"missing required filter(s): {', '.join(missing)}; a match needs a role and a city "
            "and/or a state (two-letter code)",
            detail={"missing": missing},
        )
    wanted = matching.need_terms(request.need)
    if not wanted:
        raise BadRequestError(
            "need names no skill or certification to match on; describe the work, e.g. "
            "'TIG welding on stainless pipe, AWS D1.1'",
            detail={"field": "need"},
        )
    return wanted


def match_sql(config: ApiQueryConfig, request: MatchRequest) -> str:
    """The structured filters: candidates in the role and place, best rated first, bounded."""
    assert request.role is not None
    where = [f"lower(role) = {sql_string(request.role.lower())}"]
    if request.city:
        where.append(f"lower(city) = {sql_string(request.city.lower())}")
    if request.state:
        where.append(f"state = {sql_string(request.state.upper())}")
    if request.availability:
        where.append(f"availability = {sql_string(request.availability)}")
    if request.min_rating is not None:
        where.append(f"rating >= {float(request.min_rating):.2f}")
    columns = ", ".join(f"array_join({c}, '|') AS {c}" if c in _LIST_COLUMNS else c for c in _WORKER_COLUMNS)
    return (
        f"SELECT {columns}\nFROM {_table(config, WORKERS)}\nWHERE {' AND '.join(where)}\n"
        f"ORDER BY rating DESC, worker_id\nLIMIT {CANDIDATE_LIMIT}"
    )


def match_workers(engine: QueryEngine, config: ApiQueryConfig, request: MatchRequest) -> MatchAnswer:
    """``POST /match``: filter in SQL, then rank by the need (:mod:`opslake.tools.matching`)."""
    wanted = check_match_request(request)
    result = run_query(engine, match_sql(config, request), what="the match candidates", config=config)
    records = {r["worker_id"]: r for r in (_worker_record(row) for row in result.records())}
    candidates = [
        matching.Candidate(r["worker_id"], r["skills"], r["certifications"], r["rating"])
        for r in records.values()
    ]
    ranked = matching.rank(candidates, request.need, request.count)
    matches = [
        WorkerMatch(
            **{k: v for k, v in records[m.worker_id].items()},
            score=m.score,
            matched_terms=m.matched_terms,
            matched_skills=m.matched_skills,
            matched_certifications=m.matched_certifications,
        )
        for m in ranked
    ]
    return MatchAnswer(
        matches=matches,
        need_terms=wanted,
        candidates_before_ranking=len(candidates),
        candidate_limit=CANDIDATE_LIMIT,
        returned=len(matches),
        engine=result.engine,
    )
