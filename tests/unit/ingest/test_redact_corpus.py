"""Redaction against a maintained secret scanner's rule set, through the real ingest path.

tests/data/secrets/corpus.jsonl holds 300+ secrets of 200+ gitleaks rules (extract.py says how
they were taken); every secret is planted in every carrier of tests/unit/ingest/secret_carriers.py and
posted through the ``POST /events`` logic. ordinary.jsonl holds agent text with no secret in it.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from opslake.ingest.events import ingest
from opslake.ingest.redact import redact

from ...fakes import MemoryQueue
from .secret_carriers import BARE, IDENTITY_CARRIERS, KEYED, load_corpus, load_ordinary, plant, run

CORPUS = load_corpus()


@pytest.fixture(scope="module")
def outcomes():  # type: ignore[no-untyped-def]
    return run([c for record in CORPUS for c in plant(record)], ingest, MemoryQueue)


def test_the_corpus_is_data_from_gitleaks_with_its_provenance() -> None:
    rules = Counter(record["rule"] for record in CORPUS)
    assert len(rules) >= 100 and len({r["secret"] for r in CORPUS}) >= 100
    assert {"stripe-access-token", "npm-access-token", "gitlab-pat", "anthropic-api-key"} <= set(rules)
    for record in CORPUS:
        assert record["repo"] == "gitleaks/gitleaks" and len(record["commit"]) == 40
        assert record["license"].startswith("MIT") and record["origin"] in ("tps", "generated")
        assert record["kind"] in ("shape", "context") and record["secret"] in record["sample"]


def test_no_secret_survives_where_it_is_named_or_has_a_shape_of_its_own(outcomes) -> None:  # type: ignore[no-untyped-def]
    """Keyed carriers for every secret; bare carriers (text, attribute value, ids, attribute keys,
    URL-encoded, base64) for every secret gitleaks would flag standing alone."""
    missed = [
        (o.carrier.record["rule"], o.carrier.name, o.carrier.record["secret"])
        for o in outcomes
        if o.carrier.required and o.leaked
    ]
    assert missed == []
    planted = Counter(o.carrier.name for o in outcomes if o.carrier.required)
    assert set(planted) == set(KEYED) | set(BARE)  # every carrier was exercised


def test_every_planted_op_is_stored(outcomes) -> None:  # type: ignore[no-untyped-def]
    """Redaction never makes a record invalid: ids and attribute keys stay valid when redacted."""
    assert [o.carrier.name for o in outcomes if o.stored is None] == []


def test_context_only_secrets_standing_alone_in_text_are_mostly_caught(outcomes) -> None:  # type: ignore[no-untyped-def]
    """A secret gitleaks itself finds only next to its provider's name (32 hex characters after
    "adafruit") cannot always be told from an id when it stands alone; in text the entropy rule
    catches the random-looking ones. The figure is in the README; this guards it from sliding back.
    An identifying id (op, session, trace, agent) is replaced only on a known credential shape, so
    there such a secret is kept as sent, by design (issue 25: a client must find its own op)."""
    in_text = [o for o in outcomes if not o.carrier.required and o.carrier.name not in IDENTITY_CARRIERS]
    assert sum(o.leaked for o in in_text) <= 0.5 * len(in_text)
    in_ids = [o for o in outcomes if o.carrier.name in IDENTITY_CARRIERS]
    assert [o.carrier.record["secret"] for o in in_ids if o.carrier.required and o.leaked] == []


def test_ordinary_agent_text_is_left_alone() -> None:
    texts = load_ordinary()
    assert len(texts) >= 1_000
    changed = [text for text in texts if redact(text) != text]
    assert changed == [], json.dumps(changed[:5], ensure_ascii=False)
