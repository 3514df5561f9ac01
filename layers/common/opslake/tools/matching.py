"""Rank candidate workers by how well their skills and certifications cover a free-text need.

Pure, deterministic and explainable: no model, no randomness, no I/O. The need and every skill
or certification are normalised the same way (lowercase words, a stopword list, synonyms such as
``gtaw`` → ``tig``, a light suffix stemmer so ``welding``/``welder``/``welds`` meet), then

    score = 0.8 × coverage + 0.2 × min(phrases, 4) / 4

where ``coverage`` is the share of the need's terms found among the worker's skill and
certification terms, and ``phrases`` counts skills/certifications whose every term the need
names (a whole "tig welding" weighs more than a stray "welding"). Ties go to the higher rating,
then the lower ``worker_id``. Each match lists the need terms it covered and the skills and
certifications that covered them, so an agent (or a person) can see why it ranked where it did.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

COVERAGE_WEIGHT = 0.8
PHRASE_WEIGHT = 0.2
MAX_PHRASES = 4

_STOPWORDS_TEXT = """
a an and any are as at be by can for from has have in is it its looking need needs of on or our per
please plus some someone that the their them they this to we who will with worker workers able
experience experienced years year skill skills certified certification certifications must should
know knows knowing good strong
"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())

#: Multi-word phrases first: they become one canonical token before words are split.
PHRASE_SYNONYMS: tuple[tuple[str, str], ...] = (
    ("gas tungsten arc", "tig"),
    ("gas metal arc", "mig"),
    ("shielded metal arc", "stick"),
    ("flux cored", "flux"),
    ("flux-cored", "flux"),
    ("programmable logic controller", "plc"),
    ("lift truck", "forklift"),
    ("fork lift", "forklift"),
    ("hazardous materials", "hazmat"),
    ("commercial driver", "cdl"),
    ("air conditioning", "hvac"),
    ("heating and cooling", "hvac"),
    ("computer numerical control", "cnc"),
    ("g code", "gcode"),
    ("g-code", "gcode"),
    ("lockout/tagout", "lockout tagout"),
    ("loto", "lockout tagout"),
    ("blue print", "blueprint"),
    ("blueprints", "blueprint"),
)

#: Single words mapped to the word the vocabularies use (applied after stemming).
WORD_SYNONYMS: dict[str, str] = {
    "gcode": "gcode",
    "gtaw": "tig",
    "gmaw": "mig",
    "smaw": "stick",
    "fcaw": "flux",
    "heliarc": "tig",
    "plcs": "plc",
    "rf": "scan",
    "scanner": "scan",
    "electrical": "electric",
    "electrician": "electric",
    "mechanic": "mechanical",
    "fabricat": "fabrication",
    "fab": "fabrication",
    "machinist": "machin",
    "aluminium": "aluminum",
    "inox": "stainless",
    "refrigerant": "refrigeration",
}

_SUFFIXES = (("ies", "y"), ("ing", ""), ("ers", ""), ("er", ""), ("ed", ""), ("es", ""), ("s", ""))
_WORD = re.compile(r"[a-z0-9][a-z0-9&.+]*")


def stem(word: str) -> str:
    """A light suffix stemmer: ``welding``/``welder``/``welds`` → ``weld``; short words stay."""
    stripped = False
    for suffix, replacement in _SUFFIXES:
        keeps = len(word) - len(suffix) + len(replacement) >= 3
        if word.endswith(suffix) and keeps and not word.endswith(("ss", "us", "is")):
            word, stripped = word[: -len(suffix)] + replacement, True
            break
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    if stripped and len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiou":
        word = word[:-1]  # planning → plann → plan
    return word


def terms(text: str) -> list[str]:
    """The normalised terms of a text, in order of first appearance, without duplicates."""
    lowered = " " + text.lower() + " "
    for phrase, canonical in PHRASE_SYNONYMS:
        lowered = re.sub(rf"(?<![a-z0-9]){re.escape(phrase)}s?(?![a-z0-9])", f" {canonical} ", lowered)
    out: list[str] = []
    for word in _WORD.findall(lowered):
        word = word.rstrip(".")
        if not word or word in STOPWORDS:
            continue
        token = WORD_SYNONYMS.get(word) or WORD_SYNONYMS.get(stem(word)) or stem(word)
        if token not in out:
            out.append(token)
    return out


@dataclass(frozen=True)
class Candidate:
    """What the scorer needs of a worker (the caller keeps the rest of the record)."""

    worker_id: str
    skills: Sequence[str]
    certifications: Sequence[str] = ()
    rating: float = 0.0


@dataclass(frozen=True)
class Match:
    """A scored candidate and why it scored so."""

    worker_id: str
    score: float
    rating: float
    matched_terms: list[str] = field(default_factory=list)
    matched_skills: list[str] = field(default_factory=list)
    matched_certifications: list[str] = field(default_factory=list)


def need_terms(need: str) -> list[str]:
    """The terms of a need; empty when it names nothing matchable (only stopwords or symbols)."""
    return terms(need)


def _covering(phrases: Iterable[str], wanted: set[str]) -> tuple[list[str], set[str], int]:
    """(phrases sharing a term with ``wanted``, the terms they cover, how many are named in full)."""
    matched, covered, whole = [], set(), 0
    for phrase in phrases:
        phrase_terms = set(terms(phrase))
        common = phrase_terms & wanted
        if common:
            matched.append(phrase)
            covered |= common
            if phrase_terms <= wanted:
                whole += 1
    return matched, covered, whole


def score(candidate: Candidate, wanted: Sequence[str]) -> Match:
    """One candidate's score for the need's terms ``wanted`` (see the module docstring)."""
    wanted_set = set(wanted)
    skills, skill_terms, skill_whole = _covering(candidate.skills, wanted_set)
    certs, cert_terms, cert_whole = _covering(candidate.certifications, wanted_set)
    covered = skill_terms | cert_terms
    coverage = len(covered) / len(wanted_set) if wanted_set else 0.0
    phrases = min(skill_whole + cert_whole, MAX_PHRASES) / MAX_PHRASES
    value = COVERAGE_WEIGHT * coverage + PHRASE_WEIGHT * phrases if covered else 0.0
    return Match(
        worker_id=candidate.worker_id,
        score=round(value, 4),
        rating=candidate.rating,
        matched_terms=[t for t in wanted if t in covered],
        matched_skills=skills,
        matched_certifications=certs,
    )


def rank(candidates: Iterable[Candidate], need: str, count: int) -> list[Match]:
    """The best ``count`` candidates for ``need``: score, then rating, then worker id."""
    wanted = need_terms(need)
    scored = [score(c, wanted) for c in candidates]
    scored.sort(key=lambda m: (-m.score, -m.rating, m.worker_id))
    return scored[:count]
