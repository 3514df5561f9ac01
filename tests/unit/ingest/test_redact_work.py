"""Redaction's work per request is bounded by its size, whatever a hostile client sends.

A 1 MiB ``POST /events`` body full of gitleaks' keywords, tiny encoded tokens or short attributes
must not cost more per byte than ordinary text by more than a small factor (bench/README.md has
the timings; these tests count the work instead): the provider rules are tried where their
keywords are, not once per rule over the whole text; decoding has a budget that follows the
text's length; a short text that nothing can match is not scanned at all.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

import pytest

from opslake.ingest import redact as module
from opslake.ingest.provider_rules import RULES
from opslake.ingest.redact import REDACTED, redact

from .secret_carriers import CORPUS, load_ordinary

KEYWORDS = sorted({word for rule in RULES for word in rule[1]})
SCAN_RULES = sum(rule[5] == "scan" for rule in RULES)


class _Counting:
    """A compiled pattern that counts the characters its searches are given."""

    def __init__(self, pattern: re.Pattern[str], seen: Counter[str]) -> None:
        self.pattern, self.seen = pattern, seen

    def finditer(self, text: str, pos: int = 0, endpos: int | None = None) -> Any:
        end = len(text) if endpos is None else min(endpos, len(text))
        self.seen["whole"] += pos == 0 and end == len(text)
        self.seen["chars"] += end - pos
        return self.pattern.finditer(text, pos, end)

    def match(self, text: str, pos: int = 0) -> Any:
        self.seen["tries"] += 1
        return self.pattern.match(text, pos)


def test_a_text_naming_every_provider_keyword_is_not_scanned_once_per_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: Counter[str] = Counter()
    compile_rule = module._provider_pattern
    monkeypatch.setattr(module, "_provider_pattern", lambda rule: _Counting(compile_rule(rule), seen))
    getattr(module, "_start_patterns", compile_rule).cache_clear()  # built from _provider_pattern
    text = (" ".join(KEYWORDS) + " ") * 3  # ~5,800 characters: the longest text a field scans
    try:
        redact(text)
    finally:
        getattr(module, "_start_patterns", compile_rule).cache_clear()
    # Before: all 217 rules scanned the whole text. Now only the rules that cannot be anchored.
    assert seen["whole"] <= SCAN_RULES
    assert seen["chars"] <= (SCAN_RULES + 4) * len(text)
    assert seen["tries"] <= 5 * len(text) // 4  # at most one try per keyword and rule


def _records(rule_id: str) -> list[str]:
    return [record["sample"] for record in CORPUS_RECORDS if record["rule"] == rule_id]


CORPUS_RECORDS = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("rule", RULES, ids=[rule[0] for rule in RULES])
def test_anchored_search_finds_what_a_whole_text_scan_finds(rule: tuple[Any, ...]) -> None:
    """On gitleaks' examples: every match of a ``start`` rule begins with a keyword, every match
    of a ``near`` rule holds one and fits its width, and the anchored search finds each match."""
    rule_id, keywords, source, _group, _entropy, mode, width = rule
    index = RULES.index(rule)
    pattern = re.compile(source)
    for sample in _records(rule_id):
        hits = module._keyword_hits(sample)
        found = module._keywords_of(hits)
        anchored = {m.span() for r, m in module._provider_matches(sample, hits, found) if r == index}
        for match in pattern.finditer(sample):
            lowered = match.group(0).lower()
            if mode == "start":
                assert any(lowered.startswith(k) for k in keywords)
            elif mode == "near":
                assert any(k in lowered for k in keywords) and len(lowered) <= width
            if found & set(keywords):  # gitleaks' gate: the rule runs only when a keyword is there
                assert match.span() in anchored


def test_short_texts_skip_only_what_cannot_match(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every shape and provider rule that fits in a short text is behind the short-text gate, and
    skipping the layers changes nothing on short pieces of ordinary and secret-bearing text."""
    limit = module.SHORT_TEXT_CHARS
    for rule_id, keywords, source, *_ in RULES:
        if sre_parse.parse(source).getwidth()[0] < limit:
            assert any(module._SHORT_GATE.search(k) for k in keywords), rule_id
    for name, gate, shape, _replacement in module._SHAPES:
        if sre_parse.parse(shape.pattern).getwidth()[0] < limit:
            assert gate and all(module._SHORT_GATE.search(g) for g in gate), name
    for token in (module._B64_TOKEN, module._BARE_TOKEN):  # base64 candidates, random-looking tokens
        assert sre_parse.parse(token.pattern).getwidth()[0] >= limit
    pieces = {
        "pw=abc1", "Bearer abc", "a://b:c@d", "%41%42", "xoxb-123456", "-u bob:pw1", "token x1y2z3",
        "sk_live_4eC39", "AKIAIOSFODNN7E", "eyJhbGciOi.ab",
    }  # fmt: skip
    for text in load_ordinary()[:400]:
        pieces.update(word for word in text.split() if len(word) < limit)
        pieces.update(text[i : i + limit - 1] for i in range(0, len(text), 7))
    fast = {piece: redact(piece) for piece in pieces}
    monkeypatch.setattr(module, "SHORT_TEXT_CHARS", 0)
    assert {piece: redact(piece) for piece in pieces} == fast


def test_many_tiny_wrapped_tokens_cost_a_bounded_number_of_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each decoded text runs every layer again; their number follows the text's length, and the
    tokens past the budget are replaced unchecked (the safe failure)."""
    calls: list[str] = []
    inner = module._redact

    def counting(text: str, depth: int, budget: Any) -> str:
        calls.append(text)
        return inner(text, depth, budget)

    monkeypatch.setattr(module, "_redact", counting)
    text = " ".join(f"%41{i:04d}bcdefghijklmnop" for i in range(100))
    cleaned = redact(text)
    allowed = (module.DECODED_ALLOWANCE + len(text)) // module.MIN_DECODED_CHARGE
    assert len(calls) <= 1 + allowed + 1  # the text itself, then at most ``allowed`` decoded texts
    assert cleaned.count(REDACTED) >= 100 - allowed - 1
