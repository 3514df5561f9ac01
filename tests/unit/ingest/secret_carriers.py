"""Plant each secret of tests/data/secrets/corpus.jsonl in the places agents put secrets, run the ops
through the real ingest path (``POST /events`` logic: validation, redaction, the queue message) and
say which stored records still hold a secret.

Shared by tests/unit/ingest/test_redact_corpus.py (asserts) and bench/bench_redaction.py (before/after
figures against any copy of the ``opslake`` package on ``sys.path``).

Carriers come in two kinds. *Keyed* carriers name the secret (a secret-named attribute key or JSON
key, an env or YAML assignment, a URL parameter, each also URL-encoded or base64-wrapped): every
secret must be caught there. *Bare* carriers show the secret alone (in an error text, an attribute
value, an id, an attribute key, URL-encoded or base64 alone): a secret with a shape of its own
(gitleaks' unique-token rules, ``kind`` "shape") must be caught there too; a secret that gitleaks
itself recognises only next to its provider's name (``kind`` "context", e.g. 32 hex characters)
is reported, not asserted, there.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

CORPUS = Path(__file__).resolve().parents[2] / "data/secrets/corpus.jsonl"
ORDINARY = Path(__file__).resolve().parents[2] / "data/secrets/ordinary.jsonl"
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
BASE = {"endpoint": "tool:deploy", "success": False, "duration_ms": 12.5}
KEYED = (
    "attribute_under_secret_key",
    "json_in_error",
    "json_in_attribute",
    "env_assignment",
    "yaml_assignment",
    "url_query_parameter",
    "url_encoded_form",
    "base64_env_file",
    "gitleaks_example",
    "assigned_in_id_attribute",
    "url_encoded_in_id_attribute",
)
BARE = (
    "plain_error",
    "attribute_value",
    "agent_id",
    "session_id",
    "trace_id",
    "endpoint",
    "attribute_key",
    "url_encoded_alone",
    "base64_alone",
    "base64_session_id",
)
# identifying ids: known shapes only (also base64-wrapped)
IDENTITY_CARRIERS = ("agent_id", "session_id", "trace_id", "base64_session_id")
_ATTRIBUTE_KEY = re.compile(r"^[A-Za-z0-9_.:\-]+$")


def load_corpus() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


def load_ordinary() -> list[str]:
    return [json.loads(line)["text"] for line in ORDINARY.read_text().splitlines() if line.strip()]


@dataclass
class Carrier:
    record: dict[str, Any]
    name: str
    op: dict[str, Any]
    forms: tuple[str, ...]  # what must not be stored: the secret, and its wrapped form if any
    required: bool = field(init=False)

    def __post_init__(self) -> None:
        self.required = self.name in KEYED or self.record["kind"] == "shape"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _env_name(keyword: str) -> str:
    name = re.sub(r"[^A-Za-z0-9]+", "_", keyword).strip("_").upper()
    return name if name and name[0].isalpha() else "SERVICE"


def plant(record: dict[str, Any]) -> Iterator[Carrier]:
    """Every carrier of one secret (ids only for secrets an id can hold)."""
    s = record["secret"]
    env = _env_name(record["keyword"])

    def op(**fields: Any) -> dict[str, Any]:
        return {**BASE, **fields}

    yield Carrier(record, "attribute_under_secret_key", op(attributes={"api_key": s}), (s,))
    inner = json.dumps({"config": {"client_secret": s}})
    yield Carrier(record, "json_in_error", op(error=f"upstream refused {inner} at step 3"), (s,))
    payload = json.dumps({"request": json.dumps({"auth": {"password": s}})})
    yield Carrier(record, "json_in_attribute", op(attributes={"payload": payload}), (s,))
    yield Carrier(record, "env_assignment", op(error=f"export {env}_SECRET_KEY={s}\nexport REGION=us"), (s,))
    yield Carrier(
        record, "yaml_assignment", op(error=f"db:\n  host: db.internal\n  db_password: {s}\n"), (s,)
    )
    query = f"GET https://api.example.com/v1/items?page=2&access_token={quote(s, safe='')}&sort=asc"
    yield Carrier(record, "url_query_parameter", op(input_summary=query), (s, quote(s, safe="")))
    form = quote(f"user=bob&password={s}", safe="")
    yield Carrier(record, "url_encoded_form", op(input_summary=f"POST /login body={form}"), (s, form))
    wrapped = _b64(f"REGION=us-east-1\n{env}_API_TOKEN={s}\n")
    yield Carrier(record, "base64_env_file", op(input_summary=f"env file {wrapped} uploaded"), (s, wrapped))
    # An id-named attribute holding an assignment to a password name, or a URL-encoded "token=…":
    # an id is kept as sent only when it holds no credential, wrapped or not.
    yield Carrier(
        record, "assigned_in_id_attribute", op(attributes={"upload_id": f"job-7:password={s}"}), (s,)
    )
    encoded_token = quote(f"token={s}", safe="")
    yield Carrier(
        record,
        "url_encoded_in_id_attribute",
        op(attributes={"gen_ai.tool.call.id": encoded_token}),
        (s, encoded_token),
    )
    if record["origin"] == "tps":
        yield Carrier(record, "gitleaks_example", op(error=f"config contained: {record['sample']}"), (s,))
    yield Carrier(record, "plain_error", op(error=f"call rejected with {s} after retry"), (s,))
    yield Carrier(record, "attribute_value", op(attributes={"detail": s}), (s,))
    if len(s) <= 180 and not re.search(r"\s", s):
        yield Carrier(record, "agent_id", op(agent_id=f"agent-{s}"), (s,))
        yield Carrier(record, "session_id", op(session_id=s), (s,))
        yield Carrier(record, "trace_id", op(trace_id=f"{s}"), (s,))
        yield Carrier(record, "endpoint", op(endpoint=f"/v1/{s}/items"), (s,))
    if len(_b64(s)) <= 200:
        yield Carrier(record, "base64_session_id", op(session_id=_b64(s)), (s, _b64(s)))
    if len(s) <= 120 and _ATTRIBUTE_KEY.match(s):
        yield Carrier(record, "attribute_key", op(attributes={s: "1"}), (s,))
    if quote(s, safe="") != s:
        encoded = quote(s, safe="")
        yield Carrier(record, "url_encoded_alone", op(input_summary=f"GET /search?q={encoded}"), (s, encoded))
    yield Carrier(record, "base64_alone", op(error=f"blob {_b64(s)} rejected"), (s, _b64(s)))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def leaks(carrier: Carrier, stored: dict[str, Any]) -> bool:
    """Whether the stored record still holds the secret (or its wrapped form, or a long part of it)."""
    text = "\n".join(_strings(stored))
    secret = carrier.forms[0]
    context = json.dumps(carrier.op)
    for form in carrier.forms:
        context = context.replace(form, "")
    parts = [secret[: len(secret) // 2], secret[len(secret) // 2 :]] if len(secret) >= 24 else []
    # A half of the secret that the carrier's own text holds anyway (an env name) is no leak.
    parts = [part for part in parts if part not in context]
    return any(form in text for form in carrier.forms) or any(part in text for part in parts)


@dataclass
class Outcome:
    carrier: Carrier
    stored: dict[str, Any] | None  # None: the op was rejected
    leaked: bool


def run(
    carriers: list[Carrier], ingest: Callable[..., Any], queue_factory: Callable[[], Any]
) -> list[Outcome]:
    """Each carrier's op through ``ingest`` (batches of 200, as a runtime would post them)."""
    outcomes: list[Outcome] = []
    for start in range(0, len(carriers), 200):
        batch = carriers[start : start + 200]
        queue = queue_factory()
        ops = [{**c.op, "op_id": f"c{start + i}"} for i, c in enumerate(batch)]
        result = ingest(json.dumps({"ops": ops}), reporter_id="runtime-a", queue=queue, received_at=NOW)
        stored = {}
        for message in queue.messages:
            record = json.loads(message)
            stored[record["op_id"]] = record
        accepted = list(result.accepted)
        for i, carrier in enumerate(batch):
            op_id = f"c{start + i}"
            # op_id is an id too: it is redacted only if it held a secret, which these do not.
            record = stored.get(op_id) if op_id in accepted else None
            outcomes.append(Outcome(carrier, record, record is not None and leaks(carrier, record)))
    return outcomes


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """Misses per carrier and kind, and over the required placements."""
    by_carrier: dict[str, dict[str, int]] = {}
    for o in outcomes:
        row = by_carrier.setdefault(o.carrier.name, {"planted": 0, "missed": 0, "rejected": 0})
        row["planted"] += 1
        row["missed"] += o.leaked
        row["rejected"] += o.stored is None
    required = [o for o in outcomes if o.carrier.required]
    context_bare = [o for o in outcomes if not o.carrier.required]
    context_ids = [o for o in context_bare if o.carrier.name in IDENTITY_CARRIERS]
    context_text = [o for o in context_bare if o.carrier.name not in IDENTITY_CARRIERS]
    return {
        "secrets": len({o.carrier.record["secret"] for o in outcomes}),
        "placements": len(outcomes),
        "missed": sum(o.leaked for o in outcomes),
        "required_placements": len(required),
        "required_missed": sum(o.leaked for o in required),
        "context_bare_placements": len(context_bare),
        "context_bare_missed": sum(o.leaked for o in context_bare),
        "context_text_placements": len(context_text),
        "context_text_missed": sum(o.leaked for o in context_text),
        "context_id_placements": len(context_ids),
        "context_id_missed": sum(o.leaked for o in context_ids),
        "by_carrier": by_carrier,
    }
