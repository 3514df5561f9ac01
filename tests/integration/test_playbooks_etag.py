"""GET /playbooks answers with an ETag and honours If-None-Match (304, empty body); the
observation middleware still records every call, a 304 as a success."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from opslake.models import QueuedOp

from ..conftest import api_event
from .conftest import BUCKET, Aws

pytestmark = pytest.mark.integration

Answer = tuple[int, dict[str, str], str]


def _entry(entry_id: str, confidence: float, **fields: Any) -> dict[str, Any]:
    return {
        "entry_id": entry_id, "trigger": f"before {entry_id}", "action": "filter on dt first", "kind": "do",
        "confidence": confidence, "domain": "sql", "status": "active", "endpoint": "/sql",
        "evidence_op_ids": ["op-1", "op-2", "op-3"], "created_at": "2026-11-20T10:00:00Z", **fields,
    }  # fmt: skip


SNAPSHOT = {"generated_at": "2026-11-21T10:00:00Z", "entries": [_entry("a", 0.9), _entry("b", 0.5)]}


def _put(aws: Aws, snapshot: dict[str, Any]) -> None:
    aws.s3.put_object(Bucket=BUCKET, Key="playbooks/current.json", Body=json.dumps(snapshot).encode())


@pytest.fixture
def playbooks(
    aws: Aws, load_handler: Callable[..., ModuleType], lambda_context: Any
) -> tuple[ModuleType, Callable[..., Answer]]:
    module = load_handler("functions/gateway/playbooks.py", **aws.env())

    def get(query: dict[str, str] | None = None, headers: dict[str, str] | None = None) -> Answer:
        event = api_event("GET", "/playbooks", None, key_id=aws.key_id)
        event["queryStringParameters"] = query
        event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()} if query else None
        event["headers"] = {**(event.get("headers") or {}), **(headers or {})}
        event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
        answer = module.handler(event, lambda_context)
        merged = {k.lower(): v for k, v in (answer.get("headers") or {}).items()}
        merged.update({k.lower(): v[-1] for k, v in (answer.get("multiValueHeaders") or {}).items()})
        return answer["statusCode"], merged, answer.get("body") or ""

    return module, get


def _records(aws: Aws) -> list[QueuedOp]:
    return [QueuedOp.model_validate_json(m["Body"]) for m in aws.receive_all()]


def test_etag_and_304_when_unchanged(aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]]) -> None:
    _put(aws, SNAPSHOT)
    _, get = playbooks
    status, headers, body = get()
    assert status == 200 and [e["entry_id"] for e in json.loads(body)["entries"]] == ["a", "b"]
    etag = headers["etag"]
    assert etag.startswith('"') and etag.endswith('"') and len(etag) > 10
    assert get()[1]["etag"] == etag  # stable for the same snapshot and query

    status, headers, body = get(headers={"If-None-Match": etag})
    assert (status, body, headers["etag"]) == (304, "", etag)
    assert get(headers={"if-none-match": f'"other", W/{etag}'})[0] == 304  # lists and weak tags
    assert get(headers={"If-None-Match": "*"})[0] == 304
    assert get(headers={"If-None-Match": '"stale"'})[0] == 200

    ops = _records(aws)
    assert len(ops) == 6  # every call observed, 304s included
    not_modified = [op for op in ops if op.attributes.get("http_status") == "304"]
    assert len(not_modified) == 3
    assert all(op.success and op.error_type is None for op in ops)
    assert not_modified[0].output_summary == "not modified (2 entries)"
    assert not_modified[0].attributes["not_modified"] == "true"
    # which entries each agent was served: the consolidator measures an entry on its readers
    assert {op.attributes["entry_ids"] for op in ops} == {"a,b"}


def test_etag_depends_on_query_and_snapshot(
    aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]]
) -> None:
    _put(aws, SNAPSHOT)
    module, get = playbooks
    etag = get()[1]["etag"]
    limited = get({"limit": "1"})[1]["etag"]
    assert limited != etag
    assert get({"limit": "1"}, {"If-None-Match": etag})[0] == 200  # another selection, another tag

    _put(aws, {**SNAPSHOT, "entries": [_entry("a", 0.95)]})  # the consolidator replaced the snapshot
    module.snapshot._ttl_s = 0
    status, headers, body = get(headers={"If-None-Match": etag})
    assert status == 200 and headers["etag"] != etag
    assert [e["confidence"] for e in json.loads(body)["entries"]] == [0.95]


def test_etag_without_a_snapshot(aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]]) -> None:
    _, get = playbooks
    status, headers, body = get()
    assert status == 200 and json.loads(body) == {"entries": [], "generated_at": None}
    assert get(headers={"If-None-Match": headers["etag"]})[:3:2] == (304, "")
