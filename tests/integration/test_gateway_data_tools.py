"""GET /tables, GET /tables/{name}, GET /worker/{id}, POST /match: the handlers driven by REST (v1)
events against moto (Glue, the ops queue, API key names) and a fake query engine, asserting on the
answer and on the op record each call left on the queue; then once for real through the local
stack (LocalApi over the loaded sample dataset, embedded engine)."""

from __future__ import annotations

import base64
import copy
import gzip
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from opslake.datasets.schema import WORKERS_SCHEMA, glue_columns
from opslake.datasets.staffing import DESCRIPTIONS, generate, generate_workers
from opslake.query.base import Column, QueryEngine, QueryFailedError, QueryResult, QueryTimeoutError
from opslake_local import cli
from opslake_local.dataset import dataset_key, load_dataset
from opslake_local.http import LocalApi
from opslake_local.stack import QUIET_ENV, LocalStack
from tests.conftest import load_event
from tests.integration.conftest import BUCKET, DATABASE, Aws

from ..fakes import FakeEngine

pytestmark = pytest.mark.integration

WORKER_COLUMNS = [
    "worker_id", "name", "role", "city", "state", "skills", "certifications", "availability",
    "years_experience", "rating", "hourly_rate",
]  # fmt: skip


def _row(worker: dict[str, Any]) -> tuple[Any, ...]:
    """A worker as the tools' SQL returns it (arrays joined with |, as Athena would give them)."""
    return tuple(
        "|".join(worker[c]) if c in ("skills", "certifications") else worker[c] for c in WORKER_COLUMNS
    )


def _result(columns: list[str], rows: list[tuple[Any, ...]]) -> QueryResult:
    return QueryResult([Column(c, "varchar") for c in columns], rows, engine="athena", query_id="q-1")


WORKERS = generate_workers(count=200)


def _event(
    name: str, *, path: str, path_params: dict[str, str] | None = None, body: Any = None
) -> dict[str, Any]:
    event = copy.deepcopy(load_event(name))
    event["path"] = event["requestContext"]["path"] = path
    event["pathParameters"] = path_params
    if body is not None:
        event["body"] = body if isinstance(body, str) else json.dumps(body)
    return event


@pytest.fixture
def tool(
    aws: Aws, load_handler: Callable[..., ModuleType], monkeypatch: pytest.MonkeyPatch, lambda_context: Any
) -> Callable[..., Callable[[dict[str, Any]], dict[str, Any]]]:
    """Cold-start a gateway handler against moto (and a fake engine); returns an invoker that also
    collects the op record the call left on the queue."""
    for table in ("workers", "placements"):
        aws.glue.create_table(
            DatabaseName=DATABASE,
            TableInput={
                "Name": table,
                "Description": DESCRIPTIONS[table],
                "TableType": "EXTERNAL_TABLE",
                "StorageDescriptor": {
                    "Columns": glue_columns(table),
                    "Location": f"s3://{BUCKET}/datasets/{table}/",
                },
            },
        )

    def make(
        relative_path: str, engine: QueryEngine | None = None
    ) -> Callable[[dict[str, Any]], dict[str, Any]]:
        module = load_handler(
            relative_path, **aws.env(), OPSLAKE_QUERY_ENGINE="athena", OPSLAKE_ATHENA_WORKGROUP="wg"
        )
        if engine is not None:
            monkeypatch.setattr(module, "query_engine", lambda: engine)

        def invoke(event: dict[str, Any]) -> dict[str, Any]:
            event["requestContext"]["identity"]["apiKeyId"] = aws.key_id
            answer: dict[str, Any] = module.handler(event, lambda_context)
            answer["json"] = json.loads(answer["body"])
            (message,) = aws.receive_all()
            answer["op"] = json.loads(message["Body"])
            return answer

        return invoke

    return make


def _assert_op(
    op: dict[str, Any],
    *,
    endpoint: str,
    success: bool,
    summary: str | None = None,
    error_type: str | None = None,
) -> None:
    assert op["endpoint"] == endpoint
    assert op["source"] == "gateway"
    assert op["success"] is success
    assert op["reporter_id"] == op["agent_id"] == "runtime-alpha"  # the key's name, not its id
    assert op.get("error_type") == error_type
    if summary is not None:
        assert op["output_summary"] == summary


# ---- GET /tables, GET /tables/{name} -------------------------------------------------------------
def test_tables_lists_the_allowlisted_tables_from_glue(tool: Callable[..., Any], aws: Aws) -> None:
    aws.glue.create_table(DatabaseName=DATABASE, TableInput={"Name": "secret_stuff"})
    answer = tool("functions/gateway/tables.py")(load_event("tables_get.json"))
    assert answer["statusCode"] == 200
    tables = {t["name"]: t for t in answer["json"]["tables"]}
    assert list(tables) == ["workers", "placements", "ops"]  # secret_stuff is not allowlisted
    workers = tables["workers"]
    assert workers["description"] == DESCRIPTIONS["workers"]
    assert {"name": "skills", "type": "array<string>"} in workers["columns"]
    assert workers["partition_keys"] == []
    assert tables["ops"]["partition_keys"] == [
        {"name": "dt", "type": "string"},
        {"name": "hour", "type": "string"},
    ]
    _assert_op(answer["op"], endpoint="/tables", success=True, summary="3 tables")


def test_one_table(tool: Callable[..., Any]) -> None:
    answer = tool("functions/gateway/tables.py")(load_event("table_get.json"))
    assert answer["statusCode"] == 200
    assert answer["json"]["name"] == "workers"
    assert [c["name"] for c in answer["json"]["columns"]] == WORKER_COLUMNS
    _assert_op(answer["op"], endpoint="/tables/{name}", success=True, summary="table workers: 11 columns")
    assert answer["op"]["attributes"]["table"] == "workers"


@pytest.mark.parametrize("name", ["secret_stuff", "nope"])
def test_unknown_or_unlisted_table_is_404_listing_the_available_ones(
    tool: Callable[..., Any], aws: Aws, name: str
) -> None:
    aws.glue.create_table(DatabaseName=DATABASE, TableInput={"Name": "secret_stuff"})
    event = _event("table_get.json", path=f"/tables/{name}", path_params={"name": name})
    answer = tool("functions/gateway/tables.py")(event)
    assert answer["statusCode"] == 404
    assert answer["json"]["error"] == "not_found"
    assert answer["json"]["detail"]["available"] == ["workers", "placements", "ops"]
    assert "available tables: workers, placements, ops" in answer["json"]["message"]
    _assert_op(answer["op"], endpoint="/tables/{name}", success=False, error_type="not_found")


def test_tables_are_cached_per_container(tool: Callable[..., Any], aws: Aws) -> None:
    invoke = tool("functions/gateway/tables.py")
    assert len(invoke(load_event("tables_get.json"))["json"]["tables"]) == 3
    aws.glue.delete_table(DatabaseName=DATABASE, Name="placements")
    assert len(invoke(load_event("tables_get.json"))["json"]["tables"]) == 3  # within the TTL


# ---- GET /worker/{id} ----------------------------------------------------------------------------
def test_worker_200_with_placements_count(tool: Callable[..., Any]) -> None:
    worker = WORKERS[41]
    engine = FakeEngine(_result([*WORKER_COLUMNS, "placements"], [(*_row(worker), 3)]))
    answer = tool("functions/gateway/worker.py", engine)(load_event("worker_get.json"))
    assert answer["statusCode"] == 200
    assert answer["json"]["worker"] == {**worker, "placements": 3}
    (sql,) = engine.sql
    assert "w.worker_id = 'W00042'" in sql and 'FROM "opslake_test"."workers" w' in sql
    assert "p.worker_id = 'W00042'" in sql and '"opslake_test"."placements"' in sql
    _assert_op(answer["op"], endpoint="/worker/{id}", success=True, summary="worker W00042")


@pytest.mark.parametrize("bad", ["W42", "w00042", "W00042'", "x' OR '1'='1", "W000420", "W00001\n"])
def test_worker_400_for_a_malformed_id_runs_no_query(tool: Callable[..., Any], bad: str) -> None:
    engine = FakeEngine()
    event = _event("worker_get.json", path=f"/worker/{bad}", path_params={"id": bad})
    answer = tool("functions/gateway/worker.py", engine)(event)
    assert answer["statusCode"] == 400
    assert "W followed by five digits" in answer["json"]["message"]
    assert engine.sql == []
    _assert_op(answer["op"], endpoint="/worker/{id}", success=False, error_type="bad_request")


def test_worker_404_for_an_unknown_id(tool: Callable[..., Any]) -> None:
    engine = FakeEngine(_result([*WORKER_COLUMNS, "placements"], []))
    event = _event("worker_get.json", path="/worker/W99999", path_params={"id": "W99999"})
    answer = tool("functions/gateway/worker.py", engine)(event)
    assert answer["statusCode"] == 404
    assert answer["json"]["message"] == "no worker with id 'W99999'"
    _assert_op(answer["op"], endpoint="/worker/{id}", success=False, error_type="not_found")


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (QueryFailedError("HIVE_BAD_DATA: x", query_id="q-9"), 502, "query_failed"),
        (QueryTimeoutError("slow"), 503, "query_unavailable"),
    ],
)
def test_worker_engine_failures(tool: Callable[..., Any], error: Exception, status: int, code: str) -> None:
    answer = tool("functions/gateway/worker.py", FakeEngine(error))(load_event("worker_get.json"))
    assert answer["statusCode"] == status
    assert answer["json"]["error"] == code
    assert "HIVE_BAD_DATA" not in answer["body"]
    _assert_op(answer["op"], endpoint="/worker/{id}", success=False, error_type=code)


# ---- POST /match ---------------------------------------------------------------------------------
def _welders() -> list[dict[str, Any]]:
    return [w for w in WORKERS if w["role"] == "welder"]


def test_match_ranks_candidates_by_need(tool: Callable[..., Any]) -> None:
    welders = _welders()
    engine = FakeEngine(_result(WORKER_COLUMNS, [_row(w) for w in welders]))
    answer = tool("functions/gateway/match.py", engine)(load_event("match_post.json"))
    assert answer["statusCode"] == 200
    body = answer["json"]
    assert body["candidates_before_ranking"] == len(welders)
    assert body["returned"] == len(body["matches"]) == min(5, len(welders))
    scores = [(m["score"], m["rating"]) for m in body["matches"]]
    assert scores == sorted(scores, reverse=True)
    best = body["matches"][0]
    assert best["score"] > 0 and best["matched_terms"] and best["matched_skills"]
    assert set(best["matched_skills"]) <= set(best["skills"])
    (sql,) = engine.sql
    assert "lower(role) = 'welder'" in sql and "state = 'TX'" in sql
    assert "availability = 'immediate'" in sql and "rating >= 3.50" in sql and "LIMIT 300" in sql
    _assert_op(answer["op"], endpoint="/match", success=True, summary=f"{body['returned']} matches")
    assert answer["op"]["attributes"]["role"] == "welder" and answer["op"]["attributes"]["state"] == "TX"


def test_match_escapes_text_filters(tool: Callable[..., Any]) -> None:
    engine = FakeEngine(_result(WORKER_COLUMNS, []))
    body = {"role": "welder' OR '1'='1", "city": "Coeur d'Alene", "need": "tig"}
    answer = tool("functions/gateway/match.py", engine)(_event("match_post.json", path="/match", body=body))
    assert answer["statusCode"] == 200 and answer["json"]["matches"] == []
    assert "lower(role) = 'welder'' or ''1''=''1'" in engine.sql[0]
    assert "lower(city) = 'coeur d''alene'" in engine.sql[0]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"need": "tig welding"}, "missing required filter(s): role, city or state"),
        ({"role": "welder", "need": "tig welding"}, "missing required filter(s): city or state"),
        ({"city": "Houston", "need": "tig welding"}, "missing required filter(s): role"),
        ({"role": "welder", "state": "TX", "need": "the, and please"}, "need names no skill"),
        ({"role": "welder", "state": "TX"}, "need: Field required"),
        (
            {"role": "welder", "state": "TX", "need": "tig", "count": 51},
            "count: Input should be less than or equal to 50",
        ),
        (
            {"role": "welder", "state": "TX", "need": "tig", "count": 0},
            "count: Input should be greater than or equal to 1",
        ),
        ({"role": "welder", "state": "Texas", "need": "tig"}, "state:"),
        ({"role": "welder", "state": "TX", "need": "tig", "availability": "soon"}, "availability:"),
        ({"role": "welder", "state": "TX", "need": "tig", "min_rating": 9}, "min_rating:"),
        (
            {"role": "welder", "state": "TX", "need": "tig", "salary": 9},
            "salary: Extra inputs are not permitted",
        ),
        ("{not json", "invalid request"),
    ],
)
def test_match_400_names_what_is_wrong_and_runs_no_query(
    tool: Callable[..., Any], body: Any, message: str
) -> None:
    engine = FakeEngine()
    answer = tool("functions/gateway/match.py", engine)(_event("match_post.json", path="/match", body=body))
    assert answer["statusCode"] == 400, answer["json"]
    assert message in answer["json"]["message"]
    assert engine.sql == []
    _assert_op(answer["op"], endpoint="/match", success=False, error_type="bad_request")


def _binary_event(raw: bytes, **headers: str) -> dict[str, Any]:
    """POST /match as API Gateway sends a body that is not text: base64, with isBase64Encoded."""
    event = _event("match_post.json", path="/match", body=base64.b64encode(raw).decode())
    event["isBase64Encoded"] = True
    event["headers"].update(headers)
    event["multiValueHeaders"].update({k: [v] for k, v in headers.items()})
    return event


_MATCH = json.dumps({"role": "welder", "state": "TX", "need": "tig"})
MATCH_BAD_BODIES = {
    "invalid UTF-8": (_MATCH.replace("tig", "tig \xff").encode("latin-1"), {}, 400, "invalid_encoding"),
    "UTF-16": (_MATCH.encode("utf-16"), {}, 400, "invalid_encoding"),
    "gzip": (gzip.compress(_MATCH.encode()), {"Content-Encoding": "gzip"}, 415, "unsupported_media_type"),
    "gzip without its header": (gzip.compress(_MATCH.encode()), {}, 400, "invalid_encoding"),
    "text/plain": (_MATCH.encode(), {"Content-Type": "text/plain"}, 415, "unsupported_media_type"),
    "nested 1,000 deep": (
        _MATCH.replace("}", ', "x": ' + "[" * 1000 + "]" * 1000 + "}").encode(),
        {},
        400,
        "json_too_deep",
    ),
}


@pytest.mark.parametrize(
    ("raw", "headers", "status", "error"), MATCH_BAD_BODIES.values(), ids=MATCH_BAD_BODIES.keys()
)
def test_match_undecodable_bodies_are_4xx_observed_and_run_no_query(
    tool: Callable[..., Any], raw: bytes, headers: dict[str, str], status: int, error: str
) -> None:
    engine = FakeEngine()
    answer = tool("functions/gateway/match.py", engine)(_binary_event(raw, **headers))
    assert (answer["statusCode"], answer["json"]["error"]) == (status, error), answer["json"]
    assert answer["json"]["message"] and engine.sql == []
    _assert_op(answer["op"], endpoint="/match", success=False, error_type=error)


def test_match_503_when_the_engine_times_out(tool: Callable[..., Any]) -> None:
    answer = tool("functions/gateway/match.py", FakeEngine(QueryTimeoutError("slow")))(
        load_event("match_post.json")
    )
    assert answer["statusCode"] == 503
    assert answer["json"]["error"] == "query_unavailable"
    _assert_op(answer["op"], endpoint="/match", success=False, error_type="query_unavailable")


# ---- for real: the local stack, its loaded dataset, the embedded engine --------------------------
@pytest.fixture(scope="module")
def local_api() -> Iterator[tuple[httpx.Client, LocalStack]]:
    with LocalStack(env_overrides=QUIET_ENV) as stack:
        api = LocalApi(stack, stack.invoker())
        base_url = api.start()
        try:
            assert stack.api_key is not None
            with httpx.Client(
                base_url=base_url, timeout=30, headers={"x-api-key": stack.api_key.value}
            ) as client:
                yield client, stack
        finally:
            api.stop()


def test_local_stack_tables_worker_and_match(local_api: tuple[httpx.Client, LocalStack]) -> None:
    client, _ = local_api
    tables = client.get("/tables")
    assert tables.status_code == 200
    assert [t["name"] for t in tables.json()["tables"]] == ["workers", "placements", "ops"]

    worker = client.get("/worker/W00042")
    assert worker.status_code == 200, worker.text
    record = worker.json()["worker"]
    data = generate()  # what the local stack loaded: the default seed and size
    expected = next(w for w in data["workers"] if w["worker_id"] == "W00042")
    placements = sum(p["worker_id"] == "W00042" for p in data["placements"])
    assert record == {**expected, "placements": placements}
    assert worker.json()["engine"] == "embedded"

    match = client.post(
        "/match",
        json={"role": "Welder", "state": "tx", "need": "TIG welding on stainless pipe, AWS D1.1", "count": 3},
    )
    assert match.status_code == 200, match.text
    body = match.json()
    assert body["candidates_before_ranking"] > 3 and body["returned"] == 3
    assert all(m["role"] == "welder" and m["state"] == "TX" for m in body["matches"])
    assert body["matches"][0]["score"] >= body["matches"][-1]["score"] > 0
    assert "tig" in body["matches"][0]["matched_terms"]


def test_cli_dataset_load_writes_parquet_to_the_running_stack(
    local_api: tuple[httpx.Client, LocalStack], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, stack = local_api
    state = tmp_path / "local.json"
    state.write_text(json.dumps(stack.describe()))
    assert cli.main(["--state", str(state), "dataset", "load", "--workers", "50", "--seed", "7"]) == 0
    assert "workers: 50 rows -> s3://" in capsys.readouterr().out
    body = stack.client("s3").get_object(Bucket=stack.bucket, Key=dataset_key("workers"))["Body"].read()
    table = pq.read_table(io.BytesIO(body))
    assert table.num_rows == 50 and table.schema == WORKERS_SCHEMA
    load_dataset(stack.client("s3"), stack.bucket)  # back to the default for the other tests


def test_load_dataset_onto_a_pyarrow_filesystem(tmp_path: Path) -> None:
    loaded = load_dataset(pafs.LocalFileSystem(), str(tmp_path), workers=20)
    assert [(t.table, t.key) for t in loaded] == [
        ("workers", dataset_key("workers")),
        ("placements", dataset_key("placements")),
    ]
    assert pq.read_table(tmp_path / dataset_key("workers")).num_rows == 20
    with pytest.raises(ValueError, match="unknown dataset table"):
        load_dataset(pafs.LocalFileSystem(), str(tmp_path), tables=["nope"])
