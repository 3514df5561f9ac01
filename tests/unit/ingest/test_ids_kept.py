"""Ids kept as sent (issue 25): realistic ids of 28 common forms, bare and inside text, are never
rewritten, while secrets of a known shape planted in the same places are still caught.

The ids come from tests/data/ids/id_forms.py (fixed seed, 11,200 ids and as many texts); the
secrets from tests/data/secrets/corpus.jsonl (gitleaks' rules and samples).
"""

from __future__ import annotations

import base64
import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from opslake.ingest.events import ingest
from opslake.ingest.redact import REDACTED, redact, redact_attribute, redact_identifier

from ...fakes import MemoryQueue
from .secret_carriers import NOW, load_corpus

ID_FORMS = Path(__file__).resolve().parents[2] / "data/ids/id_forms.py"
# The corpus as generated on 2026-11-28 (python tests/data/ids/id_forms.py prints it): a change to
# the generator changes what the figures in bench/README were measured on.
DIGEST = "d98980842f4ca161fab2637af7c1f769aee7631d538ee4f4ef4f65f5297ff086"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("id_forms", ID_FORMS)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("id_forms", module)
    spec.loader.exec_module(module)
    return module


forms = _load()
IDS: list[tuple[str, str]] = list(forms.ids())
TEXTS: list[tuple[str, str]] = list(forms.texts())
SHAPED_SECRETS = sorted(
    {
        r["secret"]
        for r in load_corpus()
        if r["kind"] == "shape" and len(r["secret"]) <= 180 and " " not in r["secret"]
    }
)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _rewritten(pairs: list[tuple[str, str]], changes: object) -> dict[str, list[str]]:
    by_form: dict[str, list[str]] = {}
    for form, value in pairs:
        if changes(value):  # type: ignore[operator]
            by_form.setdefault(form, []).append(value)
    return by_form


def test_the_corpus_is_large_varied_and_reproducible() -> None:
    counts = Counter(form for form, _ in IDS)
    assert len(IDS) >= 10_000 and len(counts) >= 25 and min(counts.values()) >= 400
    assert len({value for _, value in IDS}) == len(IDS)  # no two ids alike: each counts
    assert forms.digest() == DIGEST


def test_no_id_is_rewritten_as_an_identifying_id() -> None:
    assert _rewritten(IDS, lambda v: redact_identifier(v) != v) == {}


def test_no_id_is_rewritten_as_a_tool_call_id_attribute() -> None:
    assert _rewritten(IDS, lambda v: redact_attribute("gen_ai.tool.call.id", v) != v) == {}


def test_no_id_is_rewritten_standing_alone_in_text() -> None:
    assert _rewritten(IDS, lambda v: redact(v) != v) == {}


def test_no_id_is_rewritten_inside_log_lines_errors_and_json() -> None:
    changed = _rewritten(TEXTS, lambda t: redact(t) != t)
    assert changed == {}, json.dumps(
        {form: [redact(t) for t in texts[:2]] for form, texts in changed.items()}
    )


def test_ids_reach_the_queue_as_sent_through_post_events() -> None:
    """op_id, session_id and trace_id of every op, its error text around the id: stored unchanged."""
    texts = [text for _, text in TEXTS]
    stored: dict[str, dict[str, str]] = {}
    for start in range(0, len(IDS), 500):
        queue = MemoryQueue()
        ops = [
            {
                "endpoint": "tool:lookup",
                "success": False,
                "duration_ms": 3.0,
                "op_id": value,
                "session_id": IDS[(start + i + 1) % len(IDS)][1],
                "trace_id": IDS[(start + i + 2) % len(IDS)][1],
                "error": texts[start + i],
            }
            for i, (_, value) in enumerate(IDS[start : start + 500])
        ]
        result = ingest(json.dumps({"ops": ops}), reporter_id="runtime-a", queue=queue, received_at=NOW)
        assert result.rejected == [] and result.redacted_ids == []
        for message in queue.messages:
            record = json.loads(message)
            stored[record["op_id"]] = record
    for i, (_, value) in enumerate(IDS):
        record = stored[value]
        assert record["session_id"] == IDS[(i + 1) % len(IDS)][1]
        assert record["trace_id"] == IDS[(i + 2) % len(IDS)][1]
        assert record["error"] == texts[i]


def test_secrets_of_a_known_shape_are_still_caught_where_the_ids_were() -> None:
    """The same places, a gitleaks secret instead of the id: replaced as an id and in every text."""
    assert len(SHAPED_SECRETS) >= 100
    missed_as_id = [s for s in SHAPED_SECRETS if redact_identifier(s) == s]
    missed_in_text = [
        (template, s)
        for s in SHAPED_SECRETS
        for template in (*forms.TEMPLATES, *forms.S3_TEMPLATES)
        if s in redact(template.format(id=s))
    ]
    assert missed_as_id == [] and missed_in_text == []


@pytest.mark.parametrize(
    "secret",
    [
        "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "rk_live_" + "51H8xYzAbCdEfGhIjKlMnOpQr",
        "sk-proj-" + "Ab3dE9fG2hJ4kL6mN8pQ0rS2tU4vW6xY8zA1bC3dE5fG7hJ9",
    ],
)
def test_a_secret_prefix_is_not_a_public_id(secret: str) -> None:
    """Stripe's secret and restricted keys, OpenAI's project keys: caught in text and as ids."""
    assert redact(f"charge failed for {secret}") == f"charge failed for {REDACTED}"
    assert redact_identifier(secret).startswith("redacted-")


@pytest.mark.parametrize("prefix", ["agent-", "run_", "tenant.a/", "k:", "bob@", "p|", "q+", "v="])
def test_a_secret_after_an_ids_joint_is_caught(prefix: str) -> None:
    """An id is often a name, a joint, then a token: a rule that wants a boundary before its token
    (Azure's client secrets, Sentry's tokens after "_") still finds it there."""
    missed = [s for s in SHAPED_SECRETS if redact_identifier(prefix + s) == prefix + s]
    assert missed == []


def test_a_secret_in_a_text_data_uri_is_still_caught() -> None:
    """A media body is never taken for random, but what decodes to text is checked: in an SVG, a
    text data: URI, or a "PNG" that is text."""
    import base64

    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    for kind in ("image/svg+xml", "text/plain", "image/png"):
        body = base64.b64encode(f"<svg><!-- token {secret} --></svg>".encode()).decode()
        text = f'{{"url": "data:{kind};base64,{body}"}}'
        assert body not in redact(text), kind


# ---- wrapped and keyed credentials inside ids (the review of the change above) -------------------
# Each was caught before ids were kept as sent (the entropy layer took the whole id), and was then
# stored verbatim: a known shape URL-encoded or base64-wrapped, a value assigned to a password or
# token name, a presigned URL or a connection string under an id-named attribute key.
_GHP = "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5"
_KNOWN = {
    "github": _GHP,
    "github_pat": "github_pat_11"
    + "ABCDEFGHIJ0123456789_"
    + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5aB3dE5gH7jK9mN1pQ3sT5vW7",
    "anthropic": "sk-ant-api03-"
    + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5" * 2
    + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bAA",
    "slack": "xoxb-123456789012-1234567890123-" + "aB3dE5gH7jK9mN1pQ3sT5vW7",
    "stripe": "sk_live_" + "aB3dE5gH7jK9mN1pQ3sT5vW7",
    "aws_secret": "aB3dE5gH7jK9mN1pQ3sT5/vW7yZ9bC1dF3hJ5xYz",
    "google": "AIza" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5",
    "gitlab": "glpat-" + "aB3dE5gH7jK9mN1pQ3sT",
}
_B64 = {f"base64 {name}": _b64(secret) for name, secret in _KNOWN.items()}
WRAPPED = {
    **_B64,
    "base64 git credential": _b64("x-access-token:" + _GHP),
    "base64 basic auth": _b64("admin:S3cr3tP4ssw0rd!"),
    "url-encoded token=": "token%3D" + _KNOWN["stripe"],
    "url-encoded Password=": "Password%3Dhunter2",
}
KEYED_IN_IDS = {
    "pass=": "job-7:pass=hunter2",
    "pw=": "pw=hunter2",
    "db_pass=": "db_pass=hunter2xyz",
    "access_token=": "access_token=Zq8Kp3LmN7vXb2Rt9YwE",
    "api_token=": "api_token=Zq8Kp3LmN7vXb2Rt9YwE",
    "private_token=": "private_token=Zq8Kp3LmN7vXb2Rt9YwE",
    "auth=": "auth=Zq8Kp3LmN7vXb2Rt",
    "auth:": "auth:Zq8Kp3LmN7vXb2Rt",
    "token=<64 hex>": "token=" + "3f9c2a7b1e4d8f6a0c5b9e2d7a1f4c8b3e6d9a2f5c8b1e4d7a0f3c6b9e2d5a8f",
    "alice;pass=": "alice;pass=hunter2",
    "azure connection string": "AccountName=acct;AccountKey="
    + "Zq8Kp3LmN7vXb2Rt9YwEaBcD" * 3
    + "12345678==;EndpointSuffix=core.windows.net",
}
_SIG = "3f9c2a7b1e4d8f6a0c5b9e2d7a1f4c8b3e6d9a2f5c8b1e4d7a0f3c6b9e2d5a8f"
TEXT_IN_IDS = {
    "azure sas": "https://acct.blob.core.windows.net/c/f.txt?sv=2021-06-08&se=2026-12-01&sr=b&sp=r"
    "&sig=Zq8Kp3LmN7vXb2Rt9YwE%2BaBcDeFgHiJkLmNoPqRs%3D",
    "s3 presigned": "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=" + _SIG,
    "gcs signed": "https://storage.googleapis.com/b/o?X-Goog-Signature=" + _SIG,
    "url access_token": "https://api.example.com/x?access_token=Zq8Kp3LmN7vXb2Rt9YwEaBcD",
    "json token": '{"token":"Zq8Kp3LmN7vXb2Rt9YwEaBcD"}',
    "redis empty user": "redis://:Zq8Kp3LmN7vXb2Rt@cache:6379/0",
}
CREDENTIALS_IN_IDS = {**WRAPPED, **KEYED_IN_IDS, **TEXT_IN_IDS}
# Past the first joints an id's last one is looked at too (in text the name and the token read as one
# dashed word, as they did before ids were kept).
AFTER_A_LONG_NAME = {
    "40 characters after 150": "x" * 150 + "-aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5xYzW",
    "40 characters after 9 joints": "a-b-c-d-e-f-g-h-i-j-" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5xYzW",
}
# Ids that look a little like the above and are ids: a secret word going on into a name, a node id
# wrapping "04:User583231", a short Relay id, a URL-encoded S3 key, a base64-padded session id.
LOOKALIKE_IDS = [
    "password-reset-42",
    "token-bucket-7",
    "auth-service-3",
    "auth-service-3:run-5",
    "pass-through-9",
    "MDQ6VXNlcjU4MzIzMQ==",
    _b64("User:42"),
    _b64("Repository:123456789"),
    "raw%2Fdt%3D2026-11-28%2Fpart-00000.parquet",
    "q1VZn3hL8kPz0aXcYw2RtA==",
    "sid=8f14e45fceea167a5a36dedd4bea2543",
    "tenant=acme;run=42",
    "x" * 199,
    "run-" + "x" * 170 + "-7",
]


@pytest.mark.parametrize("name", [*CREDENTIALS_IN_IDS, *AFTER_A_LONG_NAME])
def test_a_wrapped_or_keyed_credential_is_caught_as_an_id(name: str) -> None:
    value = {**CREDENTIALS_IN_IDS, **AFTER_A_LONG_NAME}[name]
    assert redact_identifier(value).startswith("redacted-")


@pytest.mark.parametrize("name", [*CREDENTIALS_IN_IDS, *AFTER_A_LONG_NAME])
def test_a_wrapped_or_keyed_credential_is_caught_under_an_id_named_attribute_key(name: str) -> None:
    value = {**CREDENTIALS_IN_IDS, **AFTER_A_LONG_NAME}[name]
    for key in ("upload_id", "gen_ai.tool.call.id", "request_uuid"):
        stored = redact_attribute(key, value)
        assert stored != value and "hunter2" not in stored and "Zq8Kp3LmN7vXb2Rt" not in stored, key


@pytest.mark.parametrize("name", CREDENTIALS_IN_IDS)
def test_a_wrapped_or_keyed_credential_is_caught_in_text(name: str) -> None:
    value = CREDENTIALS_IN_IDS[name]
    stored = redact(f"upload failed for {value} today")
    assert value not in stored and "hunter2" not in stored and "Zq8Kp3LmN7vXb2Rt" not in stored


def test_a_text_value_under_an_id_named_key_keeps_its_url_around_the_secret() -> None:
    """A presigned URL under "upload_id" is redacted as text: the signature goes, the URL stays."""
    stored = redact_attribute("upload_id", TEXT_IN_IDS["s3 presigned"])
    assert stored.startswith("https://b.s3.amazonaws.com/k?") and _SIG not in stored


@pytest.mark.parametrize("value", LOOKALIKE_IDS)
def test_ids_that_resemble_credentials_are_kept(value: str) -> None:
    assert redact_identifier(value) == value
    assert redact_attribute("gen_ai.tool.call.id", value) == value


def test_wrapped_and_keyed_credentials_reach_the_queue_replaced_through_post_events() -> None:
    """As op_id, session_id and an id-named attribute of one op: none stored as sent."""
    values = list(CREDENTIALS_IN_IDS.values())
    ops = [
        {
            "endpoint": "tool:lookup",
            "success": True,
            "duration_ms": 1.0,
            "op_id": value[:200] if len(value) <= 200 else f"o{i}",
            "session_id": value if len(value) <= 200 else f"s{i}",
            "attributes": {"upload_id": value},
        }
        for i, value in enumerate(values)
    ]
    queue = MemoryQueue()
    result = ingest(json.dumps({"ops": ops}), reporter_id="runtime-a", queue=queue, received_at=NOW)
    assert result.rejected == [] and len(queue.messages) == len(values)
    for message, value in zip(queue.messages, values, strict=True):
        assert value not in message and "hunter2" not in message and "Zq8Kp3LmN7vXb2Rt" not in message
