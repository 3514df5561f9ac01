"""POST /events logic: per-op validation, batch shape, limits, persist-then-acknowledge."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opslake.errors import (
    BadRequestError,
    InvalidOpsError,
    JsonTooDeepError,
    MalformedJsonError,
    OpslakeError,
    PayloadTooLargeError,
    ServiceUnavailableError,
    UndecodableBodyError,
)
from opslake.http.bodies import MAX_JSON_DEPTH
from opslake.ingest.events import MAX_OPS_PER_REQUEST, MAX_REQUEST_BYTES, ingest, parse_ops
from opslake.models import QueuedOp

from ...fakes import MemoryQueue

NOW = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
GOOD = {"endpoint": "tool:query_db", "success": True, "duration_ms": 5}


def run(body: object, queue: MemoryQueue | None = None):
    text = body if isinstance(body, str) else json.dumps(body)
    return ingest(text, reporter_id="runtime-a", queue=queue or MemoryQueue(), received_at=NOW)


def test_single_op_is_accepted_and_queued_with_server_identity() -> None:
    queue = MemoryQueue()
    result = run({**GOOD, "op_id": "op-1"}, queue)
    assert result.accepted == ["op-1"] and result.rejected == []
    queued = QueuedOp.model_validate_json(queue.messages[0])
    assert queued.reporter_id == "runtime-a" and queued.op_id == "op-1"


def test_batch_validates_each_op_on_its_own() -> None:
    queue = MemoryQueue()
    result = run(
        {"ops": [GOOD, {**GOOD, "duration_ms": "fast"}, {**GOOD, "reporter_id": "evil"}, GOOD]}, queue
    )
    assert len(result.accepted) == 2 and len(queue.messages) == 2
    assert [r.index for r in result.rejected] == [1, 2]
    assert "duration_ms" in result.rejected[0].message
    assert "reporter_id is set by the server" in result.rejected[1].message


def test_all_invalid_is_400_with_the_same_detail() -> None:
    queue = MemoryQueue()
    with pytest.raises(InvalidOpsError) as info:
        run({"ops": [{"endpoint": "/x"}, 7]}, queue)
    assert info.value.status == 400 and queue.messages == []
    rejected = info.value.detail["rejected"]
    assert [r["index"] for r in rejected] == [0, 1]
    assert "success: field required" in rejected[0]["message"]
    assert "must be a JSON object" in rejected[1]["message"]


@pytest.mark.parametrize(
    ("body", "error", "fragment"),
    [
        ("{not json", MalformedJsonError, "not valid JSON"),
        ("", BadRequestError, "empty"),
        ("[1, 2]", BadRequestError, "not a JSON list"),
        ('"hello"', BadRequestError, "not a JSON str"),
        ('{"ops": {}}', BadRequestError, "must be a list"),
        ('{"ops": []}', BadRequestError, "is empty"),
        ('{"ops": [], "extra": 1}', BadRequestError, "unexpected"),
    ],
)
def test_bad_bodies_say_what_is_wrong(body: str, error: type[OpslakeError], fragment: str) -> None:
    with pytest.raises(error, match=fragment) as info:
        run(body)
    assert info.value.status == 400


def test_too_many_ops_is_413() -> None:
    with pytest.raises(PayloadTooLargeError, match=f"limit is {MAX_OPS_PER_REQUEST}"):
        run({"ops": [GOOD] * (MAX_OPS_PER_REQUEST + 1)})


def test_too_large_body_is_413() -> None:
    with pytest.raises(PayloadTooLargeError) as info:
        run({**GOOD, "error": "x" * MAX_REQUEST_BYTES})
    assert info.value.status == 413


def test_queue_failure_is_503_with_retry_after_and_nothing_accepted() -> None:
    with pytest.raises(ServiceUnavailableError) as info:
        run({"ops": [GOOD, {"bad": 1}]}, MemoryQueue(fail=True))
    assert info.value.status == 503
    assert info.value.headers["Retry-After"] == "5"
    assert info.value.detail["accepted"] == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=20,
)
op_like = st.fixed_dictionaries(
    {},
    optional={
        "endpoint": json_values | st.text(max_size=250),
        "success": json_values,
        "duration_ms": json_values | st.floats(),
        "op_id": json_values,
        "ts": json_values | st.datetimes().map(lambda d: d.isoformat()),
        "attributes": json_values,
        "error": json_values,
        "applied_at_turn": json_values,
        "reporter_id": json_values,
    },
)


@given(
    st.one_of(
        json_values, op_like, st.fixed_dictionaries({"ops": st.lists(op_like | json_values, max_size=5)})
    )
)
def test_any_json_is_accepted_or_rejected_with_a_message_never_an_exception(value: object) -> None:
    queue = MemoryQueue()
    try:
        result = run(value, queue)
    except OpslakeError as exc:
        assert 400 <= exc.status < 500 and exc.message
        assert queue.messages == []
        return
    assert len(result.accepted) == len(queue.messages) >= 1
    assert all(r.message for r in result.rejected)


def test_lone_surrogates_are_rejected_per_field_not_crashing() -> None:
    body = '{"ops": [{"endpoint": "/x", "success": true, "duration_ms": 1, "error": "bad \\ud800"}, %s]}'
    result = run(body % json.dumps(GOOD))
    assert len(result.accepted) == 1
    assert result.rejected[0].index == 0 and result.rejected[0].errors[0]["field"] == "error"


# ---- bodies that used to raise instead of answering 4xx (issue 12) -------------------------------
@pytest.mark.parametrize(
    "body",
    [
        "[" * 1000 + "]" * 1000,
        '{"ops": [' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "]}",
        "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),
    ],
    ids=["1,000 arrays", "100,000 objects", "one past the limit"],
)
def test_json_nested_too_deeply_is_a_400_before_parsing(body: str) -> None:
    with pytest.raises(JsonTooDeepError) as raised:
        parse_ops(body)
    assert raised.value.status == 400 and f"more than {MAX_JSON_DEPTH} levels" in raised.value.message


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = '{"endpoint": "tool:x", "success": true, "duration_ms": 1, "error": "' + '[{\\"' * 200 + '"}'
    assert parse_ops(text)[0]["error"].startswith('[{"[{')


@pytest.mark.parametrize(
    "body",
    [b'{"endpoint": "\xff"}', json.dumps(GOOD).encode("utf-16"), json.dumps(GOOD).encode("utf-32")],
    ids=["invalid UTF-8", "UTF-16", "UTF-32"],
)
def test_bytes_that_are_not_utf8_are_a_400(body: bytes) -> None:
    with pytest.raises(UndecodableBodyError) as raised:
        parse_ops(body)
    assert raised.value.status == 400 and "not valid UTF-8" in raised.value.message


def test_a_lone_surrogate_is_a_400() -> None:
    with pytest.raises(UndecodableBodyError):
        parse_ops('{"endpoint": "\ud800"}')


@pytest.mark.parametrize(
    ("claim", "field"),
    [
        ({"event_kind": "log"}, "event_kind"),
        ({"event_kind": "LOG"}, "event_kind"),
        ({"source": "llm"}, "source"),
        # the transports the server observes itself: a runtime's op is not a gateway or MCP call
        ({"source": "gateway"}, "source"),
        ({"source": "MCP"}, "source"),
        ({"source": "agent_log", "event_kind": "log"}, "event_kind"),
        # compared as a reader sees them: NUL, zero-width and bidi characters, full-width letters,
        # case, spaces at the ends (issue 25)
        ({"source": "gateway\u0000"}, "source"),
        ({"source": "Gateway"}, "source"),
        ({"source": "\uff47ateway"}, "source"),
        ({"source": "\uff27\uff21\uff34\uff25\uff37\uff21\uff39"}, "source"),
        ({"source": "gate\u200bway"}, "source"),
        ({"source": "\u200egateway\u2060"}, "source"),
        ({"source": "m\u00adcp"}, "source"),
        ({"source": "\ufeffllm"}, "source"),
        ({"source": "\u1d38\u1d38\u1d39"}, "source"),  # modifier letters LLM: NFKC folds them
        ({"event_kind": "\uff4cog"}, "event_kind"),
        ({"event_kind": "lo\u200dg"}, "event_kind"),
        ({"event_kind": "LOG\u0000"}, "event_kind"),
        # invisible outside control and format: variation selector, combining grapheme joiner,
        # Hangul fillers, braille blank, Mongolian selector, tag characters; Cyrillic and Greek
        # letters drawn like Latin ones
        ({"source": "gateway\ufe0f"}, "source"),
        ({"source": "gate\u034fway"}, "source"),
        ({"source": "gateway\u3164"}, "source"),
        ({"source": "\u115fmcp"}, "source"),
        ({"source": "mcp\u2800"}, "source"),
        ({"source": "ll\u180bm"}, "source"),
        ({"event_kind": "log\U000e0001"}, "event_kind"),
        ({"source": "g\u0430tew\u0430y"}, "source"),
        ({"source": "GATEW\u0391Y"}, "source"),
        ({"event_kind": "l\u03bfg"}, "event_kind"),
    ],
)
def test_reserved_claims_are_refused_per_op_and_the_rest_lands(claim: dict[str, str], field: str) -> None:
    """event_kind "log" is POST /log's, source "llm" the jobs' model-call records' and sources
    "gateway"/"mcp" the observed tool calls': a client claiming one gets that op refused with the
    field and the reason; its other ops land."""
    queue = MemoryQueue()
    result = run({"ops": [{**GOOD, "op_id": "ok-1"}, {**GOOD, **claim, "op_id": "forged"}, GOOD]}, queue)
    assert len(result.accepted) == 2 and "forged" not in result.accepted and len(queue.messages) == 2
    [rejected] = result.rejected
    assert rejected.index == 1 and rejected.errors[0]["field"] == field
    assert "reserved" in rejected.message


def test_other_sources_and_event_kinds_are_still_a_clients_to_claim() -> None:
    result = run(
        {"ops": [{**GOOD, "source": "runtime", "event_kind": "rescue"}, {**GOOD, "event_kind": "logs"}]}
    )
    assert len(result.accepted) == 2 and result.rejected == []


def test_a_label_near_a_reserved_one_is_kept_as_sent() -> None:
    """Only what reads as a reserved label is refused; a client's own label is stored as sent."""
    queue = MemoryQueue()
    sent = ["gateway-proxy", "\uff47ateway2", "mcp client", "llm\u00e9", "\u0433ateway", "mcp\u2801"]
    result = run({"ops": [{**GOOD, "source": s, "op_id": f"s{i}"} for i, s in enumerate(sent)]}, queue)
    assert result.rejected == []
    assert sorted(json.loads(m)["source"] for m in queue.messages) == sorted(sent)


def test_the_server_may_write_its_own_reserved_records() -> None:
    from opslake.models import OpInput

    op = OpInput.server_record({**GOOD, "source": "agent_log", "event_kind": "log"})
    assert op.to_queued(reporter_id="r", received_at=NOW).event_kind == "log"
    with pytest.raises(ValueError, match="reserved"):
        OpInput.model_validate({**GOOD, "event_kind": "log"})


def test_secrets_in_every_field_never_reach_the_queue() -> None:
    """Issue 12's planted forms, each through POST /events: secret-named attribute keys, JSON in a
    string, env and YAML assignments, cookies, URL-encoded and base64 forms, ids and labels,
    opslake's own API keys and provider tokens."""
    key = "9Fq2_xLm0PzT-7vWcR3sKd8YhN1bJe5uGa4oQiZt"  # the local stack's token_urlsafe(30)[:40] shape
    ops = [
        {**GOOD, "attributes": {"password": "hunter2", "api_key": "k-123"}},
        {**GOOD, "error": 'bad config {"db": {"password": "hunter2"}}'},
        {**GOOD, "error": "POSTGRES_PASSWORD=hunter2 db_password: hunter2"},
        {
            **GOOD,
            "input_summary": "Cookie: session=hunter2; x=1",
            "output_summary": "Set-Cookie: sid=hunter2",
        },
        {**GOOD, "input_summary": "body=user%3Dbob%26password%3Dhunter2"},
        {**GOOD, "input_summary": "env " + "cGFzc3dvcmQ9aHVudGVyMg=="},
        {**GOOD, "endpoint": f"/v1/{key}", "session_id": f"s-{key}", "agent_id": f"a-{key}"},
        {**GOOD, "trace_id": key, "error_type": f"e_{key}", "task_class": key, "attributes": {key: "x"}},
        {**GOOD, "error": "x-api-key: " + key},
        {
            **GOOD,
            "error": "charge with sk_live_4eC39HqLyjWDarjtT1zdp7dc via npm_aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gH3jK5",
        },
    ]
    queue = MemoryQueue()
    result = run({"ops": ops}, queue)
    assert len(result.accepted) == len(ops) and result.rejected == []
    stored = "\n".join(queue.messages)
    for secret in (
        "hunter2",
        "k-123",
        "cGFzc3dvcmQ9aHVudGVyMg",
        key,
        "4eC39HqLyjWDarjtT1zdp7dc",
        "aB3dE5gH7jK9",
    ):
        assert secret not in stored


def test_ops_whose_op_ids_are_redacted_stay_distinct_and_say_so() -> None:
    """issue 13: two ops whose op ids hold secrets were both stored as "[REDACTED]" (one op then
    deduped away); now each gets its own digest, a retry the same one, and the answer says which.
    Only a known credential shape makes an id redacted (issue 25): a random-looking one is kept."""
    queue = MemoryQueue()
    ids = ["run-ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "sess-AKIAZ5QW3RTY7UIOP2AS"]
    kept = "V1StGXR8_Z5jdHi6B-myTq9k"
    result = run({"ops": [{**GOOD, "op_id": i} for i in [*ids, kept]] + [{**GOOD, "op_id": "op-3"}]}, queue)
    first, second, random_looking, plain = result.accepted
    assert first != second and plain == "op-3" and random_looking == kept
    assert first.startswith("redacted-") and second.startswith("redacted-")
    assert not any(i in message for i in ids for message in queue.messages)
    assert [(r.index, r.fields) for r in result.redacted_ids] == [(0, ["op_id"]), (1, ["op_id"])]
    assert run({**GOOD, "op_id": ids[0]}).accepted == [first]  # the retry keeps its id
