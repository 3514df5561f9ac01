"""The playbook holdout arms (issue 16) on the real handlers: GET /playbooks serves each API key its
treatment entries of the selection and records the held-out ones as withheld (on a 200 and a 304);
the arms hash the key's *name* (the record's ``reporter_id``), never what a client claims; MCP
``resources/read`` of a held-out entry finds nothing (and records it withheld), ``resources/list``
and ``POST /search`` do not show it. Same moto account and fixture as test_playbooks_etag.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import pytest

from opslake.ingest.observe import build_record
from opslake.models import MAX_ATTRIBUTE_VALUE_CHARS
from opslake.models.playbooks import HOLDOUT_SALT, PlaybookEntry, arm_of
from opslake.tools.playbook_arms import joined_ids

from ..conftest import api_event
from . import test_playbooks_etag
from .conftest import Aws
from .test_playbooks_etag import Answer, _entry, _put, _records

playbooks = test_playbooks_etag.playbooks  # the fixture: the handler and a GET with a chosen key

pytestmark = pytest.mark.integration

#: 20 entries in their first experiment (half of the readers held out), each its own trigger.
ENTRIES = [
    _entry(f"pb_{i:016x}", 0.5 + i / 100, holdout_share=0.5, trigger=f"before step{i:02d}") for i in range(20)
]
SNAPSHOT = {"generated_at": "2026-11-21T10:00:00Z", "entries": ENTRIES}
RANKED = [e["entry_id"] for e in sorted(ENTRIES, key=lambda e: -e["confidence"])]


@pytest.fixture
def second_key(aws: Aws) -> tuple[str, str]:
    key = aws.apigateway.create_api_key(name="runtime-beta", enabled=True, value="b" * 40)
    return key["id"], "runtime-beta"


def _arms(key_name: str) -> tuple[list[str], list[str]]:
    entries = [PlaybookEntry.model_validate(e) for e in ENTRIES]
    arms = {e.entry_id: arm_of(key_name, e, HOLDOUT_SALT) for e in entries}
    return [i for i in RANKED if arms[i] == "treatment"], [i for i in RANKED if arms[i] == "holdout"]


def _ids(value: str) -> list[str]:
    return value.split(",") if value else []


def test_each_key_is_served_its_treatment_entries_and_the_rest_is_recorded_withheld(
    aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]], second_key: tuple[str, str]
) -> None:
    _put(aws, SNAPSHOT)
    _, get = playbooks
    seen: dict[str, tuple[list[str], list[str]]] = {}
    for key_id, key_name in ((aws.key_id, aws.key_name), second_key):
        status, headers, body = get({"limit": "50"}, key_id=key_id)
        assert status == 200 and headers["cache-control"] == "private, no-cache"
        served = [e["entry_id"] for e in json.loads(body)["entries"]]
        assert get({"limit": "50"}, key_id=key_id)[2] == body  # stable across reads
        assert get({"limit": "50"}, {"If-None-Match": headers["etag"]}, key_id=key_id)[0] == 304
        ops = _records(aws)
        assert len(ops) == 3 and {op.reporter_id for op in ops} == {key_name}
        # recorded alike on the 200s and the 304
        assert {(op.attributes["entry_ids"], op.attributes["withheld_ids"]) for op in ops} == {
            (",".join(served), ops[0].attributes["withheld_ids"])
        }
        assert all(op.attributes["holdout"] == "1" and op.attributes["format"] == "json" for op in ops)
        withheld = _ids(ops[0].attributes["withheld_ids"])
        # served and withheld partition the selection (no backfill), each in rank order
        assert not set(served) & set(withheld) and sorted(served + withheld) == sorted(RANKED)
        assert served == [i for i in RANKED if i in served] and withheld == [
            i for i in RANKED if i in withheld
        ]
        assert served and withheld  # 20 entries at a 0.5 share: both arms hold some
        assert (served, withheld) == _arms(key_name)  # the hash of the key's name
        seen[key_name] = (served, withheld)
    assert seen["runtime-alpha"] != seen["runtime-beta"]  # each key its own arms, hence its own body


def test_the_split_comes_after_the_selection_with_no_backfill(
    aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]]
) -> None:
    _put(aws, SNAPSHOT)
    _, _, body = playbooks[1]({"limit": "5"})
    (op,) = _records(aws)
    served = [e["entry_id"] for e in json.loads(body)["entries"]]
    assert sorted(served + _ids(op.attributes["withheld_ids"])) == sorted(RANKED[:5])
    assert len(served) < 5  # runtime-alpha is held out of one of the five: fewer entries, not others


def test_a_client_claiming_another_agent_keeps_its_keys_arms(
    aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]], second_key: tuple[str, str]
) -> None:
    """The agent ids and sessions a client sends do not move it: only the key it authenticated with."""
    _put(aws, SNAPSHOT)
    _, get = playbooks
    own = get({"limit": "50"})
    claimed = {"x-opslake-agent-id": "runtime-beta", "x-opslake-session-id": "runtime-beta"}
    assert get({"limit": "50"}, claimed)[1:] == own[1:]
    assert get({"limit": "50"}, key_id=second_key[0])[2] != own[2]
    ops = _records(aws)
    assert [op.reporter_id for op in ops] == ["runtime-alpha", "runtime-alpha", "runtime-beta"]
    assert ops[0].attributes["withheld_ids"] == ops[1].attributes["withheld_ids"]


def test_a_key_name_lookup_failure_splits_and_records_by_the_key_id_alike(
    aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]]
) -> None:
    """When API Gateway cannot name the key, the route's arms and the record both use the key id."""
    _, get = playbooks
    _put(aws, SNAPSHOT)
    unknown = "unknown-key-id"  # moto has no such key: GetApiKey fails, the id is the identity
    _, _, body = get({"limit": "50"}, key_id=unknown)
    (op,) = _records(aws)
    assert op.reporter_id == unknown
    served = [e["entry_id"] for e in json.loads(body)["entries"]]
    assert (served, _ids(op.attributes["withheld_ids"])) == _arms(unknown)


def test_fifty_consolidator_ids_fit_one_attribute_and_longer_ones_are_cut_whole() -> None:
    entries = [PlaybookEntry.model_validate(_entry(f"pb_{i:016x}", 0.5)) for i in range(50)]
    joined, cut = joined_ids(entries)
    assert (len(joined), cut) == (999, 0) and len(joined) <= MAX_ATTRIBUTE_VALUE_CHARS
    record = build_record(
        endpoint="/playbooks",
        reporter_id="k",
        started_at=datetime.now(UTC),
        duration_ms=1,
        status=200,
        request_text="GET /playbooks",
        headers={},
        output_summary="0 entries",
        error_code=None,
        error_message=None,
        attributes={"entry_ids": joined, "withheld_ids": joined, "holdout": "1"},
    )  # fmt: skip (the observation middleware's own record: redaction and bounds applied)
    assert record.attributes is not None and record.attributes["withheld_ids"] == joined  # kept whole
    long = [PlaybookEntry.model_validate(_entry(f"entry-{i:03d}-" + "x" * 40, 0.5)) for i in range(50)]
    joined, cut = joined_ids(long)
    assert len(joined) <= MAX_ATTRIBUTE_VALUE_CHARS and cut > 0
    assert joined.split(",") == [e.entry_id for e in long[: 50 - cut]]  # whole ids, in order


def test_a_full_selection_of_held_out_entries_is_recorded_whole(
    aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]]
) -> None:
    """50 consolidator ids withheld at once (share 1): the record keeps every one."""
    everything = [_entry(f"pb_{i:016x}", 0.5, holdout_share=1.0) for i in range(60)]
    _put(aws, {**SNAPSHOT, "entries": everything})
    _, _, body = playbooks[1]({"limit": "50"})
    (op,) = _records(aws)
    assert json.loads(body)["entries"] == [] and op.attributes["entry_ids"] == ""
    assert len(_ids(op.attributes["withheld_ids"])) == 50 and "ids_cut" not in op.attributes


# ---- the other doors: MCP resources and POST /search -------------------------------------------------
def _mcp(
    aws: Aws, load_handler: Callable[..., ModuleType], lambda_context: Any
) -> Callable[[str, dict[str, Any] | None], dict[str, Any]]:
    module = load_handler("functions/gateway/mcp_http.py", **aws.env())

    def request(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params else {})}
        event = api_event("POST", "/mcp", json.dumps(message), key_id=aws.key_id)
        event["headers"] = {"Content-Type": "application/json", "mcp-protocol-version": "2025-11-25"}
        event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
        answer = module.handler(event, lambda_context)
        assert answer["statusCode"] == 200, answer
        body: dict[str, Any] = json.loads(answer["body"])
        return body

    return request


def test_mcp_hides_a_held_out_entry_and_records_its_read_as_withheld(
    aws: Aws, load_handler: Callable[..., ModuleType], lambda_context: Any
) -> None:
    _put(aws, SNAPSHOT)
    served, withheld = _arms(aws.key_name)
    request = _mcp(aws, load_handler, lambda_context)
    listed = [r["name"] for r in request("resources/list")["result"]["resources"]]
    assert listed == served  # the treatment entries only, in rank order
    assert _records(aws) == []  # listing records nothing

    answer = request("resources/read", {"uri": f"opslake://playbooks/{withheld[0]}"})
    assert answer["error"]["code"] == -32002 and "no active playbook entry" in answer["error"]["message"]
    answer = request("resources/read", {"uri": f"opslake://playbooks/{served[0]}"})
    assert json.loads(answer["result"]["contents"][0]["text"])["entry_id"] == served[0]
    held, read = _records(aws)
    assert (held.endpoint, held.source, held.reporter_id) == ("/playbooks", "mcp", aws.key_name)
    assert (held.attributes["entry_ids"], held.attributes["withheld_ids"]) == ("", withheld[0])
    assert (read.attributes["entry_ids"], read.attributes["withheld_ids"]) == (served[0], "")


def test_search_does_not_find_a_held_out_entry(
    aws: Aws, load_handler: Callable[..., ModuleType], lambda_context: Any
) -> None:
    _put(aws, SNAPSHOT)
    served, withheld = _arms(aws.key_name)
    module = load_handler("functions/gateway/search.py", **aws.env(), OPSLAKE_QUERY_ENGINE="embedded")

    def search(q: str) -> list[str]:
        body = json.dumps({"q": q, "sources": ["playbooks"], "limit": 50})
        answer = module.handler(api_event("POST", "/search", body, key_id=aws.key_id), lambda_context)
        assert answer["statusCode"] == 200, answer
        return [r["key"] for r in json.loads(answer["body"])["results"]]

    assert sorted(search("filter dt")) == sorted(served)
    trigger = next(e["trigger"] for e in ENTRIES if e["entry_id"] == withheld[0])  # "before step<nn>"
    assert withheld[0] not in search(trigger.split()[1] + " filter")
    assert {op.reporter_id for op in _records(aws)} == {aws.key_name}


def test_an_mcp_read_answers_json_whatever_the_mcp_request_accepts(
    aws: Aws, load_handler: Callable[..., ModuleType], lambda_context: Any
) -> None:
    """The /mcp request's Accept header must not reach GET /playbooks: one that prefers Markdown
    turned the entry's JSON into Markdown, so resources/read of a served entry answered "no active
    playbook entry" while its op record said the entry was served (a treatment exposure that never
    was), and a selection's text was Markdown labelled application/json."""
    _put(aws, SNAPSHOT)
    served, _ = _arms(aws.key_name)
    module = load_handler("functions/gateway/mcp_http.py", **aws.env())

    def request(params: dict[str, Any]) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": params}
        event = api_event("POST", "/mcp", json.dumps(message), key_id=aws.key_id)
        event["headers"] = {
            "Content-Type": "application/json", "mcp-protocol-version": "2025-11-25",
            "Accept": "text/markdown, application/json;q=0.9, text/event-stream;q=0.9",
        }  # fmt: skip
        event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
        answer = module.handler(event, lambda_context)
        assert answer["statusCode"] == 200, answer
        body: dict[str, Any] = json.loads(answer["body"])
        return body

    answer = request({"uri": f"opslake://playbooks/{served[0]}"})
    assert "error" not in answer, answer
    assert json.loads(answer["result"]["contents"][0]["text"])["entry_id"] == served[0]
    (content,) = request({"uri": "opslake://playbooks?limit=50"})["result"]["contents"]
    assert content["mimeType"] == "application/json" and json.loads(content["text"])["entries"]
    assert {r.attributes["format"] for r in _records(aws)} == {"json"}


def _emitted(out: str, name: str) -> list[tuple[float, str, list[list[str]]]]:
    """Each EMF value of metric ``name`` printed by the handler, with its namespace and dimensions."""
    found = []
    for line in out.splitlines():
        if not line.startswith("{") or '"_aws"' not in line:
            continue
        blob = json.loads(line)
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            if any(m["Name"] == name for m in directive["Metrics"]):
                found += [(v, directive["Namespace"], directive["Dimensions"]) for v in blob[name]]
    return found


def test_entries_served_counts_the_treatment_entries_on_a_200_and_a_304_alike(
    aws: Aws, playbooks: tuple[ModuleType, Callable[..., Answer]], capsys: pytest.CaptureFixture[str]
) -> None:
    _put(aws, SNAPSHOT)
    _, get = playbooks
    served, withheld = _arms(aws.key_name)
    assert served and withheld
    capsys.readouterr()
    etag = get({"limit": "50"})[1]["etag"]
    assert get({"limit": "50"}, {"If-None-Match": etag})[0] == 304
    assert get({"limit": "50", "endpoint": "/nowhere"})[0] == 200  # selects nothing
    # the dashboard's "entries served" widget reads this metric (template.yaml)
    assert _emitted(capsys.readouterr().out, "PlaybookEntriesServed") == [
        (float(len(served)), "opslake", [["service"]]),
        (float(len(served)), "opslake", [["service"]]),
        (0.0, "opslake", [["service"]]),
    ]
