"""Fast paths on ingest's per-op work (issue 13) give exactly what the full work gives: a UUID op id
skips the redaction passes only where no pass could change it, and the JSON depth check finds
what the token scan it replaced found."""

from __future__ import annotations

import random
import re
import uuid

import pytest

from opslake.errors import JsonTooDeepError
from opslake.http.bodies import check_json_depth
from opslake.ingest import redact as redaction


def _uuids(count: int, seed: int = 13) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        text = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        out.append(text.upper() if rng.random() < 0.3 else text)
    # and UUIDs holding each keyword made of hex digits and dashes ("4b1d", "a3-"), in either case
    for word in redaction._HEX_KEYWORDS:
        base = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        at = base.index("-") - len(word) + (1 if word.endswith("-") else 0)
        for candidate in (base[:at] + word + base[at + len(word) :],):
            if redaction._UUID.fullmatch(candidate):
                out += [candidate, candidate.upper()]
    return out


def test_a_uuid_is_redacted_as_the_full_passes_would(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = _uuids(3000)
    fast = [redaction.redact(text) for text in texts]
    monkeypatch.setattr(redaction, "_plain_uuid", lambda text: False)
    assert fast == [redaction.redact(text) for text in texts]


def test_a_plain_uuid_skips_the_passes_and_one_with_a_hex_keyword_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    full = redaction._shapes
    monkeypatch.setattr(redaction, "_shapes", lambda text: calls.append(text) or full(text))
    plain = "0f8fad5b-d9cb-469f-a165-70867728950e"
    assert redaction.redact(plain) == plain and calls == []
    assert redaction._HEX_KEYWORDS, "the rule set has hex-only keywords (else this test checks nothing)"
    keyword = next(word for word in redaction._HEX_KEYWORDS if "-" not in word)
    gated = keyword + plain[len(keyword) :]
    assert redaction._UUID.fullmatch(gated)
    redaction.redact(gated)
    assert calls == [gated]
    # and not a UUID at all: every pass runs
    calls.clear()
    redaction.redact("req-0f8fad5bd9cb469fa16570867728950e")
    assert calls


_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+"?|[\[\]{}]', re.S)


def _too_deep_by_tokens(text: str, limit: int) -> bool:
    """The token scan check_json_depth used before issue 13."""
    depth = 0
    for token in _TOKEN.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def test_the_depth_check_refuses_what_the_token_scan_refused() -> None:
    rng = random.Random(5)
    alphabet = '[]{}"\\a, \n'
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        limit = rng.randint(0, 6)
        try:
            check_json_depth(text, limit)
            refused = False
        except JsonTooDeepError:
            refused = True
        assert refused == _too_deep_by_tokens(text, limit), (text, limit)


def test_the_depth_check_on_a_large_batch() -> None:
    ops = ",".join('{"op_id": "x", "attributes": {"k": "[[[{{{"}}' for _ in range(500))
    check_json_depth('{"ops": [' + ops + "]}")  # 1,001 brackets, 3 deep: fine
    with pytest.raises(JsonTooDeepError):
        check_json_depth("[" * 65 + "]" * 65)
    check_json_depth('"' + "[" * 100 + '"')  # brackets inside a string do not nest
