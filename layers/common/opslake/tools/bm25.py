"""The tokenizer and the BM25 ranking behind ``POST /search``: pure, deterministic, no I/O.

A small pure-Python Okapi BM25 rather than a library: ``bm25s`` (the maintained choice) needs
numpy and scipy, which the Lambda layer does not carry (the layer is near Lambda's 250 MB and a
numpy import alone costs more than this whole module), and the corpus here is a few hundred
candidates the SQL prefilter already chose, where a dict of term counts is as fast as a sparse
matrix. The formula is the textbook one (Robertson/Spärck Jones idf, never negative)::

    idf(t)   = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(d) = Σ_t idf(t) · tf(t, d) · (k1 + 1) / (tf(t, d) + k1 · (1 - b + b · |d| / avgdl))

where N and df come from :class:`CorpusStats` of the whole collection when the caller has them
(``POST /search`` counts them in the same query that picks the candidates: candidates chosen for
containing the terms would make every term look common), else from the candidates themselves;
``avgdl`` is the average length of the candidates of the same ``group`` (a worker's row is longer
than a placement's, and should not lose for it). Words are NFKC-normalised and lower-cased,
stopwords dropped, and stemmed with the light stemmer of :mod:`opslake.tools.matching`
(``welding``/``welder`` → ``weld``), the same for the query and the documents. Ties go to the
caller's order key: the ranking is stable.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from opslake.tools.matching import stem as _stem

K1 = 1.2
B = 0.75
#: Terms shorter than this are not searched: one letter is in nearly every row.
MIN_TERM_CHARS = 2
#: Words that say nothing about which row is meant (English function words).
_STOPWORDS_TEXT = """
a an and any are as at be but by can do does for from has have how i in into is it its me my no not
of on or our so some that the their them then there these they this to was we what when where which
who why will with you your
"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
#: The same few hundred words recur in every candidate: stem each once per container.
stem = lru_cache(maxsize=8192)(_stem)
#: A word: letters and digits (any script), dotted runs kept whole (``d1.1``, ``aws d17.1``).
_WORD = re.compile(r"[^\W_]+(?:\.[^\W_]+)*")


def fold(text: str) -> str:
    """``text`` NFKC-normalised and lower-cased: full-width ``ＴＩＧ`` is ``tig`` and a decomposed
    ``e`` + combining acute is ``é``, as the tables' text (plain, composed) spells them."""
    return unicodedata.normalize("NFKC", text).lower()


def words(text: str) -> list[str]:
    """Every searchable word of ``text``, normalised, in order, duplicates kept (term frequency)."""
    out = []
    for word in _WORD.findall(fold(text)):
        if word in STOPWORDS or len(word) < MIN_TERM_CHARS:
            continue
        term = stem(word)
        if len(term) >= MIN_TERM_CHARS:
            out.append(term)
    return out


def term_words(text: str) -> dict[str, str]:
    """Each term of ``text`` and the first word it came from (``pip`` → ``pipe``): what to show."""
    shown: dict[str, str] = {}
    for word in _WORD.findall(fold(text)):
        if word not in STOPWORDS and len(word) >= MIN_TERM_CHARS:
            shown.setdefault(stem(word), word)
    return shown


def query_terms(text: str, limit: int) -> tuple[list[str], list[str]]:
    """(the first ``limit`` distinct terms of a query, the distinct terms beyond them)."""
    distinct = list(dict.fromkeys(words(text)))
    return distinct[:limit], distinct[limit:]


@dataclass(frozen=True)
class Document:
    """One candidate: a key the caller knows it by, its text, a group for length normalisation
    (its source), and a tie-break key."""

    key: Hashable
    text: str
    order: str = ""
    group: str = ""


@dataclass(frozen=True)
class CorpusStats:
    """How many documents the collection holds, and how many contain each term."""

    total: int
    df: dict[str, int]


@dataclass(frozen=True)
class Scored:
    key: Hashable
    score: float
    matched_terms: list[str] = field(default_factory=list)


def idf(total: int, df: int) -> float:
    """Robertson/Spärck Jones idf, kept positive (a term in every document still counts a little)."""
    df = min(max(df, 0), total)
    return math.log(1 + (total - df + 0.5) / (df + 0.5))


def rank(
    documents: Sequence[Document],
    terms: Sequence[str],
    *,
    stats: CorpusStats | None = None,
    k1: float = K1,
    b: float = B,
) -> list[Scored]:
    """The documents that contain at least one of ``terms``, best BM25 score first (then ``order``)."""
    if not documents or not terms:
        return []
    counts = [Counter(words(d.text)) for d in documents]
    lengths = [sum(c.values()) for c in counts]
    by_group: dict[str, list[int]] = {}
    for document, length in zip(documents, lengths, strict=True):
        by_group.setdefault(document.group, []).append(length)
    average = {g: (sum(ls) / len(ls)) or 1.0 for g, ls in by_group.items()}
    unique = list(dict.fromkeys(terms))
    if stats is None:
        stats = CorpusStats(len(documents), {t: sum(1 for c in counts if t in c) for t in unique})
    weight = {t: idf(max(stats.total, 1), stats.df.get(t, 0)) for t in unique}
    scored = []
    for document, count, length in zip(documents, counts, lengths, strict=True):
        matched = [t for t in unique if t in count]
        if not matched:
            continue
        norm = k1 * (1 - b + b * length / average[document.group])
        value = sum(weight[t] * count[t] * (k1 + 1) / (count[t] + norm) for t in matched)
        scored.append((document.order, Scored(document.key, round(value, 4), matched)))
    scored.sort(key=lambda pair: (-pair[1].score, pair[0]))
    return [s for _, s in scored]
