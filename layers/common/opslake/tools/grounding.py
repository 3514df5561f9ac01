"""The grounding check of ``POST /ask``: every fact an answer states must be in what it was made from.

An answer is *grounded* when each of these, found in its text, is supported by the evidence (the
rows the model was shown, their column names, the tables, the question and the SQL that ran):

* **numbers** (``1,234``, ``1234.0``, ``4.57``, ``45%``, ``$38``, the parts of ``2026-11-21``):
  supported when a number of the evidence has the same value, or rounds to it at the precision the
  answer writes it with (``4.5678`` supports ``4.57`` and ``5``), or — written as a percentage —
  when a ratio of the evidence times 100 does (``0.45`` supports ``45%``). The number of rows
  shown supports itself unless the rows were cut short. Nothing else: a sum, average or
  difference the model worked out is *not* supported (the plan must compute it in SQL);
* **names**: a capitalized word inside a sentence, and any word mixing letters and digits
  (``W00042``, ``D1.1``), must be a word of the evidence (case-insensitive; a plural ``s`` may be
  dropped). A capitalized dictionary word that starts a sentence is not checked (it is most likely
  just the sentence's first word), nor are month and weekday names and a few acronyms;
* **quoted strings** (``'…'``, ``"…"``, `````…`````, ``“…”``): must appear in the evidence text.

Limits, by design: words are checked one by one (two real names may be combined), spelled-out
numbers ("three") and claims without a number or a name ("most", "all of them") are not checked,
and a number that happens to appear anywhere in the evidence passes wherever it is used.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from opslake.analysis.fence import english_words

MAX_REPORTED = 10
_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(\s?%|\s?percent\b)?(?![\w])")
_WORD = re.compile(r"[^\W_](?:[\w'’.-]*[^\W_])?")
_QUOTED = re.compile(
    r"\"([^\"\n]{1,200})\"|“([^”\n]{1,200})”|`([^`\n]{1,200})`|(?<!\w)'([^'\n]{1,200})'(?!\w)"
)
_ISO_T = re.compile(r"(?<=\d)T(?=\d)")
_SENTENCE_END = re.compile(r"[.!?:;]\s*$|^\s*$|\n\s*[-*•]?\s*$")
#: Capitalized words that are never names of the data.
COMMON_NAMES = frozenset({
    "i", "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december", "monday", "tuesday", "wednesday", "thursday", "friday",
    "saturday", "sunday", "sql", "id", "ids", "utc", "iso", "ok", "json",
})  # fmt: skip


@dataclass(frozen=True)
class Evidence:
    """What an answer may draw on: numbers (exact decimals), words and the full text, casefolded."""

    numbers: frozenset[Decimal]
    words: frozenset[str]
    text: str

    @classmethod
    def of(
        cls,
        rows: Sequence[Sequence[Any]],
        *,
        texts: Iterable[str] = (),
        row_count: int | None = None,
    ) -> Evidence:
        """The evidence of ``rows`` (cells as JSON values), extra ``texts`` (question, SQL, column and
        table names) and, when the rows are all there are, their count."""
        numbers: set[Decimal] = set()
        pieces: list[str] = list(texts)
        for row in rows:
            for cell in row:
                _collect(cell, numbers, pieces)
        for piece in pieces:
            # standalone numbers only (not the 42 of W00042); an ISO timestamp's T separates two
            for match in _NUMBER.finditer(_ISO_T.sub(" ", piece)):
                value = _decimal(match.group(1) + (match.group(2) or ""))
                if value is not None:
                    numbers.add(value)
        if row_count is not None:
            numbers.add(Decimal(row_count))
        text = "\n".join(pieces).casefold()
        words = {w.casefold() for w in _WORD.findall(text)}
        # "d1.1" is one word of the answer but may be written "D1.1," or "(D1.1)" in the data
        words.update(part for w in list(words) for part in re.split(r"[.'’-]", w) if part)
        return cls(frozenset(numbers), frozenset(words), text)


def _collect(cell: Any, numbers: set[Decimal], pieces: list[str]) -> None:
    if cell is None or isinstance(cell, bool):
        return
    if isinstance(cell, int | float):
        value = _decimal(repr(cell))
        if value is not None:
            numbers.add(abs(value))
        pieces.append(str(cell))
    elif isinstance(cell, dict):
        for key, value in cell.items():
            pieces.append(str(key))
            _collect(value, numbers, pieces)
    elif isinstance(cell, list | tuple):
        for value in cell:
            _collect(value, numbers, pieces)
    else:
        pieces.append(str(cell))


def _decimal(text: str) -> Decimal | None:
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


@dataclass
class Grounding:
    """What the check found: whether every fact is supported, how many were checked, which were not."""

    grounded: bool
    numbers: int = 0
    names: int = 0
    quotes: int = 0
    unsupported: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "grounded": self.grounded,
            "checked": {"numbers": self.numbers, "names": self.names, "quotes": self.quotes},
            "unsupported": self.unsupported,
        }


def number_supported(written: str, decimals: str | None, percent: bool, evidence: Evidence) -> bool:
    """Whether a number of the answer (digits as written, its fraction, a percent sign) is supported."""
    value = _decimal(written + (decimals or ""))
    if value is None:
        return False
    if value in evidence.numbers:
        return True
    places = len(decimals) - 1 if decimals else 0
    quantum = Decimal(1).scaleb(-places)
    for candidate in evidence.numbers:
        if candidate.quantize(quantum, rounding=ROUND_HALF_UP) == value:
            return True
        if percent and (candidate * 100).quantize(quantum, rounding=ROUND_HALF_UP) == value:
            return True
    return False


def _word_supported(word: str, evidence: Evidence) -> bool:
    folded = word.casefold().strip(".'’-")
    if not folded or folded in COMMON_NAMES or folded in evidence.words:
        return True
    return any(folded.endswith(s) and folded[: -len(s)] in evidence.words for s in ("'s", "’s", "es", "s"))


def check(answer: str, evidence: Evidence) -> Grounding:
    """Check every number, name and quoted string of ``answer`` against ``evidence``."""
    result = Grounding(grounded=True)
    unsupported: list[str] = []
    vocabulary = english_words()
    spans: list[tuple[int, int]] = []

    for match in _QUOTED.finditer(answer):
        quoted = next(g for g in match.groups() if g is not None).strip()
        spans.append(match.span())
        if not quoted:
            continue
        result.quotes += 1
        if " ".join(quoted.casefold().split()) not in " ".join(evidence.text.split()):
            unsupported.append(f"'{quoted}'")

    for match in _WORD.finditer(answer):
        word = match.group()
        if any(start <= match.start() < end for start, end in spans):
            continue
        has_digit = any(c.isdigit() for c in word)
        has_letter = any(c.isalpha() for c in word)
        if has_digit and has_letter:  # an identifier: W00042, D1.1, 2nd
            if re.fullmatch(r"\d+(st|nd|rd|th)", word, re.I):
                continue
            result.names += 1
            if not _word_supported(word, evidence):
                unsupported.append(word)
            continue
        if not has_letter or not word[0].isupper():
            continue
        starts_sentence = bool(_SENTENCE_END.search(answer[: match.start()]))
        if starts_sentence and word.casefold() in vocabulary:
            continue
        result.names += 1
        if not _word_supported(word, evidence):
            unsupported.append(word)

    for match in _NUMBER.finditer(answer):
        if any(start <= match.start() < end for start, end in spans):
            continue
        # a number inside an identifier (W00042) was checked as a name
        before = answer[max(0, match.start() - 1) : match.start()]
        if before.isalpha():
            continue
        result.numbers += 1
        written, decimals, percent = match.group(1), match.group(2), match.group(3)
        if not number_supported(written, decimals, bool(percent), evidence):
            unsupported.append(match.group().strip())

    result.unsupported = list(dict.fromkeys(unsupported))[:MAX_REPORTED]
    result.grounded = not unsupported
    return result
