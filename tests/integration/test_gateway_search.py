"""POST /search over HTTP on the local stack (moto from template.yaml, the embedded engine, the sample
dataset and a playbook snapshot): ranked results that name their sources and matched terms, a
playbook entry found (and a retired one not), the 400s that say why, and one op record per call."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from opslake.datasets.staffing import generate
from opslake_local.drain import Drainer
from opslake_local.stack import LocalStack

pytestmark = pytest.mark.integration

Local = tuple[LocalStack, httpx.Client, Drainer]


def _entry(entry_id: str, trigger: str, action: str, status: str = "active", **extra: Any) -> dict[str, Any]:
    return {
        "entry_id": entry_id, "trigger": trigger, "action": action, "kind": "do", "confidence": 0.8,
        "domain": "staffing", "scope": "project", "status": status, "endpoint": "/match",
        "evidence_op_ids": [f"op-{i}" for i in range(4)], "created_at": "2026-11-20T10:00:00Z", **extra,
    }  # fmt: skip


SNAPSHOT = {
    "generated_at": "2026-11-21T10:00:00Z",
    "entries": [
        _entry("pb-stainless", "staffing stainless pipe jobs", "ask /match for tig welding and aws d17.1"),
        _entry(
            "pb-retired",
            "stainless pipe jobs",
            "guess the city",
            status="retired",
            retired_at="2026-11-21T09:00:00Z",
        ),
    ],
}


@pytest.fixture(scope="module")
def api(local: Local) -> tuple[httpx.Client, dict[str, str], Local]:
    stack, client, _ = local
    assert stack.api_key is not None
    stack.client("s3").put_object(
        Bucket=stack.bucket, Key="playbooks/current.json", Body=json.dumps(SNAPSHOT).encode()
    )
    return client, {"x-api-key": stack.api_key.value}, local


def test_search_ranks_workers_by_their_text_and_names_sources_and_terms(
    api: tuple[httpx.Client, dict[str, str], Local],
) -> None:
    client, key, _ = api
    answer = client.post("/search", json={"q": "TIG welder Detroit", "limit": 5}, headers=key)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["engine"] == "embedded" and body["terms"] == ["tig", "welder", "detroit"]
    assert body["sources"] == ["workers", "placements", "playbooks"]
    assert 0 < body["candidates"]["workers"] <= body["candidate_limit"] == 300
    data = generate()
    assert body["searched_rows"] == len(data["workers"]) + len(data["placements"]) + 1  # + the active entry
    results = body["results"]
    assert body["returned"] == len(results) == 5
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    workers = {w["worker_id"]: w for w in data["workers"]}
    top = results[0]
    assert top["source"].startswith("workers/worker_id=W") and top["table"] == "workers"
    assert top["matched_terms"] == ["tig", "welder", "detroit"]
    # the rows holding all three terms come first, and they are real Detroit TIG welders
    full = [r for r in results if r["matched_terms"] == ["tig", "welder", "detroit"]]
    assert results[: len(full)] == full
    for result in full:
        worker = workers[result["key"]]
        assert (worker["city"], worker["role"]) == ("Detroit", "welder") and "tig welding" in worker["skills"]
        assert result["key"] in result["text"] and "Detroit" in result["text"]


def test_search_finds_an_active_playbook_entry_but_not_a_retired_one(
    api: tuple[httpx.Client, dict[str, str], Local],
) -> None:
    client, key, _ = api
    answer = client.post("/search", json={"q": "stainless pipe", "sources": ["playbooks"]}, headers=key)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["engine"] is None  # playbooks alone need no query
    assert [(r["source"], r["matched_terms"]) for r in body["results"]] == [
        ("playbooks/entry_id=pb-stainless", ["stainless", "pipe"])
    ]
    mixed = client.post("/search", json={"q": "stainless pipe welding aws d17.1", "limit": 50}, headers=key)
    assert mixed.status_code == 200, mixed.text
    sources = [r["source"] for r in mixed.json()["results"]]
    assert "playbooks/entry_id=pb-stainless" in sources and "playbooks/entry_id=pb-retired" not in sources
    assert any(s.startswith("workers/") for s in sources)


def test_search_placements_by_client_name(api: tuple[httpx.Client, dict[str, str], Local]) -> None:
    client, key, _ = api
    answer = client.post(
        "/search", json={"q": "Gulf Coast Refining", "sources": ["placements"], "limit": 3}, headers=key
    )
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert len(results) == 3
    assert all(r["source"].startswith("placements/placement_id=P") for r in results)
    assert all(
        r["matched_terms"] == ["gulf", "coast", "refining"] and "Gulf Coast Refining" in r["text"]
        for r in results
    )


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"q": ""}, "q: String should have at least 1 character"),
        ({"q": "x" * 201}, "q: String should have at most 200 characters"),
        (
            {"q": "welder", "sources": ["ops"]},
            "sources.0: Input should be 'workers', 'placements' or 'playbooks'",
        ),
        ({"q": "the of %%% ' a"}, "q has no searchable term"),
        ({"q": "welder", "limit": 51}, "limit: Input should be less than or equal to 50"),
    ],
)
def test_bad_searches_are_400s_that_say_why(
    api: tuple[httpx.Client, dict[str, str], Local], body: dict[str, Any], says: str
) -> None:
    client, key, _ = api
    answer = client.post("/search", json=body, headers=key)
    assert answer.status_code == 400, answer.text
    assert says in answer.json()["message"]


def test_every_search_is_observed(api: tuple[httpx.Client, dict[str, str], Local]) -> None:
    client, key, (stack, _, drainer) = api
    assert client.post("/search", json={"q": "forklift Detroit"}, headers=key).status_code == 200
    assert client.post("/search", json={"q": ""}, headers=key).status_code == 400
    drainer.drain()
    lake = client.post(
        "/sql",
        json={
            "sql": "SELECT success, error_type, output_summary, reporter_id FROM ops WHERE endpoint = '/search'"
        },
        headers=key,
    )
    assert lake.status_code == 200, lake.text
    rows = lake.json()["rows"]
    assert stack.api_key is not None
    assert {r[3] for r in rows} == {stack.api_key.name}
    assert any(r[0] is True and r[2].endswith(" results") for r in rows)
    assert any(r[0] is False and r[1] == "bad_request" for r in rows)
