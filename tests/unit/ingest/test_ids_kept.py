"""Ids kept as sent (issue 25): realistic ids of 28 common forms, bare and inside text, are never
rewritten, while secrets of a known shape planted in the same places are still caught.

The ids come from tests/data/ids/id_forms.py (fixed seed, 11,200 ids and as many texts); the
secrets from tests/data/secrets/corpus.jsonl (gitleaks' rules and samples).
"""

from __future__ import annotations

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
