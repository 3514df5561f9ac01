"""The grounding check of ``POST /ask``: every fact an answer states must be in what it was made from.

An answer is *grounded* when each of these, found in its text (NFKC-normalized: a ``²`` is a 2), is
supported by the evidence (the rows the model was shown, the :func:`sql_facts` of the SQL that ran,
and the words — not the numbers — of the result's, the SQL's and the catalog's table and column
names; never the question: a name or number only the question holds is what the caller supposes,
not what the lake says):

* **numbers** (``1,234``, ``4 000``, ``1.000.000``, ``1234.0``, ``4.57``, ``-5``, ``45%``, ``$38``,
  ``4 million``, spelled-out ``twenty-one``, the parts of ``2026-11-21``): supported when a number
  of the evidence has the same value (sign and scale word included: 4 does not support "-4" or
  "4 million"), or rounds to it at the precision the answer writes it with (``4.5678`` supports
  ``4.57`` and ``5``; nothing but 0 supports ``0``), or — written as a percentage — when a ratio of
  the evidence times 100 does (``0.45`` supports ``45%``). The number of rows shown supports itself
  unless the rows were cut short (by the row cap, the prompt's size, or the query's own ``LIMIT``).
  Nothing else: a sum, average or difference the model worked out is *not* supported (the plan
  must compute it in SQL), nor a number of the SQL that only shapes the result (``LIMIT 5``);
* **names**: a capitalized word inside a sentence, and any word mixing letters and digits
  (``W00042``, ``D1.1``), must be a word of the evidence (case-insensitive; a plural ``s`` may be
  dropped). A capitalized dictionary word that starts a sentence is not checked (it is most likely
  just the sentence's first word), nor are month and weekday names and a few acronyms;
* **quoted strings** (``'…'``, ``"…"``, `````…`````, ``“…”``) and **addresses** (a link, an e-mail
  address, a bare domain: where an answer could send its reader): must appear in the evidence text.

Limits, by design: words are checked one by one (two real names may be combined), a lone "one" and
claims without a number or a name ("most", "all of them", "a dozen") are not checked, and a number
that appears anywhere in the evidence passes wherever it is used — so rows holding many numbers
(``SELECT *`` over 50 rows) support many claims; ``sources`` is there to be read.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from opslake.analysis.fence import english_words

MAX_REPORTED = 10
#: A number as written: an optional sign (not the hyphen of 2026-11-21), digits with "," or " " or
#: dotted thousands, a fraction, then a percent sign or a scale word (4 million is not 4).
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>(?<![\w.\-−])[-−](?=\d))?"
    r"(?P<digits>\d{1,3}(?:,\d{3})+|\d{1,3}(?: \d{3})+(?![\d.,])|\d{1,3}(?:\.\d{3}){2,}|\d+)"
    r"(?P<decimals>\.\d+)?"
    r"(?P<suffix>\s?%|\s?percent\b|\s(?:thousand|million|billion|trillion)\b)?(?![\w]|\.\d)",
    re.IGNORECASE,
)
_SCALES = {"thousand": 3, "million": 6, "billion": 9, "trillion": 12}
_SMALL_WORDS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
]  # fmt: skip
_TENS_WORDS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_NUMBER_WORD = "|".join([*_SMALL_WORDS, *_TENS_WORDS, "hundred", *_SCALES])
#: A spelled-out number: "four", "twenty-one", "four thousand", "one hundred and five".
_SPELLED = re.compile(
    rf"(?<![\w-])(?:{_NUMBER_WORD})(?:(?:\s+and)?[\s-]+(?:{_NUMBER_WORD}))*(?![\w-])", re.IGNORECASE
)
_WORD = re.compile(r"[^\W_](?:[\w'’.-]*[^\W_])?")
_QUOTED = re.compile(
    r"\"([^\"\n]{1,200})\"|“([^”\n]{1,200})”|`([^`\n]{1,200})`|(?<!\w)'([^'\n]{1,200})'(?!\w)"
)
#: A link, an e-mail address or a bare domain (with a path): where an answer could send its reader.
_ADDRESS = re.compile(
    r"\b[a-z][a-z0-9+.-]*://[^\s<>\"'()\[\]]+"
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
    r"|\b(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z]{2,24}\b(?:/[^\s<>\"'()\[\]]*)?",
    re.IGNORECASE,
)
_ISO_T = re.compile(r"(?<=\d)T(?=\d)")
_SENTENCE_END = re.compile(r"[.!?:;]\s*$|^\s*$|\n\s*[-*•]?\s*$")
#: Capitalized words that are never names of the data.
COMMON_NAMES = frozenset({
    "i", "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december", "monday", "tuesday", "wednesday", "thursday", "friday",
    "saturday", "sunday", "sql", "id", "ids", "utc", "iso", "ok", "json",
    "e.g", "i.e", "etc", "vs", "u.s", "u.k", "a.m", "p.m",
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
        names: Iterable[str] = (),
        row_count: int | None = None,
    ) -> Evidence:
        """The evidence of ``rows`` (cells as JSON values), extra ``texts`` (the SQL's literals),
        ``names`` (table and column names: their words count, their numbers do not — an alias such
        as "900 workers" is the model's own words) and, when the rows are all there are, their count."""
        numbers: set[Decimal] = set()
        pieces: list[str] = [normalize(t) for t in texts]
        for row in rows:
            for cell in row:
                _collect(cell, numbers, pieces)
        for piece in pieces:
            # standalone numbers only (not the 42 of W00042); an ISO timestamp's T separates two
            for match in _NUMBER.finditer(_ISO_T.sub(" ", piece)):
                value = _value(match)
                if value is not None:
                    numbers.update((value, abs(value)))
        if row_count is not None:
            numbers.add(Decimal(row_count))
        text = "\n".join([*pieces, *(normalize(n) for n in names)]).casefold()
        words = {w.casefold() for w in _WORD.findall(text)}
        # "d1.1" is one word of the answer but may be written "D1.1," or "(D1.1)" in the data
        words.update(part for w in list(words) for part in re.split(r"[.'’-]", w) if part)
        return cls(frozenset(numbers), frozenset(words), text)


def _collect(cell: Any, numbers: set[Decimal], pieces: list[str]) -> None:
    if cell is None or isinstance(cell, bool):
        return
    if isinstance(cell, int | float):
        value = _decimal(repr(cell))
        if value is not None:  # -5 supports "-5" and "fell by 5"; 5 never supports "-5"
            numbers.update((value, abs(value)))
        pieces.append(str(cell))
    elif isinstance(cell, dict):
        for key, value in cell.items():
            pieces.append(str(key))
            _collect(value, numbers, pieces)
    elif isinstance(cell, list | tuple):
        for value in cell:
            _collect(value, numbers, pieces)
    else:
        pieces.append(normalize(str(cell)))


def normalize(text: str) -> str:
    """``text`` in NFKC form (a superscript ² or a full-width ２ is a 2, a no-break space a space)."""
    return unicodedata.normalize("NFKC", text)


def _value(match: re.Match[str]) -> Decimal | None:
    """The value of a :data:`_NUMBER` match, sign and scale word included."""
    digits = match["digits"]
    if "." in digits:  # 1.000.000 (the pattern takes dots only as two or more thousands groups)
        digits = digits.replace(".", "")
    value = _decimal(digits.replace(" ", "") + (match["decimals"] or ""))
    if value is None:
        return None
    scale = _SCALES.get((match["suffix"] or "").strip().casefold())
    if scale:
        value = value.scaleb(scale)
    return -value if match["sign"] else value


def spelled_value(words: str) -> Decimal | None:
    """The value of a spelled-out number ("twenty-one", "four thousand"); None for a lone "one"
    (mostly a pronoun: "one of them")."""
    parts = [w for w in re.split(r"[\s-]+", words.casefold()) if w and w != "and"]
    if parts == ["one"]:
        return None
    total, current = 0, 0
    for part in parts:
        if part in _SMALL_WORDS:
            current += _SMALL_WORDS.index(part)
        elif part in _TENS_WORDS:
            current += 10 * (_TENS_WORDS.index(part) + 2)
        elif part == "hundred":
            current = max(current, 1) * 100
        else:
            total += max(current, 1) * 10 ** _SCALES[part]
            current = 0
    return Decimal(total + current)


@dataclass(frozen=True)
class SqlFacts:
    """What the SQL that ran may support: its string literals, identifiers and filter values (the
    numbers a WHERE, HAVING, IN or BETWEEN compares with), its top-level ``LIMIT``, and which result
    columns are constants the query wrote itself (``SELECT 900 AS workers FROM workers``)."""

    texts: list[str]
    limit: int | None
    constants: frozenset[int] = frozenset()
    identifiers: list[str] = field(default_factory=list)


def sql_facts(sql: str) -> SqlFacts:
    """The :class:`SqlFacts` of ``sql``. Numbers that only shape the result (``LIMIT 5``, the 2 of
    ``round(x, 2)``, the 0.95 of ``approx_percentile``) are not facts about the lake, so a "5
    workers" cannot rest on a ``LIMIT 5``; nor is a constant column (it is ``SELECT 42`` with a
    ``FROM``). SQL sqlglot cannot parse supports nothing."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="athena")
    except sqlglot.errors.SqlglotError:
        return SqlFacts([], None)
    wrappers = (exp.Alias, exp.Neg, exp.Paren, exp.Cast)

    def constant(node: exp.Expression) -> bool:
        while isinstance(node, wrappers):
            node = node.this
        return isinstance(node, exp.Literal | exp.Null | exp.Boolean)

    projections = tree.expressions if isinstance(tree, exp.Select) else []
    constants = (
        frozenset(i for i, node in enumerate(projections) if constant(node))
        if not any(isinstance(node, exp.Star) for node in projections)
        else frozenset()
    )
    skipped = {id(projections[i]) for i in constants}
    comparisons = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In, exp.Like)
    texts: list[str] = []
    identifiers: list[str] = []
    for node in tree.walk():
        if isinstance(node, exp.Literal):
            parent = node.parent
            while isinstance(parent, exp.Neg | exp.Paren | exp.Cast | exp.Tuple | exp.Alias):
                if id(parent) in skipped:
                    break
                parent = parent.parent
            if id(node) in skipped or id(parent) in skipped:
                continue
            if node.is_string:
                texts.append(node.this)
            elif isinstance(parent, comparisons):
                texts.append(("-" if isinstance(node.parent, exp.Neg) else "") + node.sql())
        elif isinstance(node, exp.Identifier):
            identifiers.append(node.name)
    limit = None
    clause = tree.args.get("limit") if isinstance(tree, exp.Query) else None
    count = clause.args.get("expression" if isinstance(clause, exp.Limit) else "count") if clause else None
    if isinstance(count, exp.Literal) and count.is_int:
        limit = int(count.this)
    return SqlFacts(texts, limit, constants, identifiers)


def asked_numbers(question: str, facts: SqlFacts) -> list[str]:
    """The SQL's ``LIMIT`` when the question holds it too ("the top 3", ``LIMIT 3``): the caller's
    own number, used by the query, may be said back; one only the question or only the LIMIT holds
    may not (filter values are in :attr:`SqlFacts.texts` already)."""
    if facts.limit is None or Decimal(facts.limit) not in Evidence.of([], texts=[question]).numbers:
        return []
    return [str(facts.limit)]


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


def number_supported(
    value: Decimal, places: int, percent: bool, evidence: Evidence, *, scale: int = 0
) -> bool:
    """Whether a number of the answer is supported: ``value`` (sign and scale applied), written with
    ``places`` decimals (of the number before its scale word), maybe as a percentage."""
    if value in evidence.numbers:
        return True
    quantum = Decimal(1).scaleb(-places)
    written = value.scaleb(-scale)
    for candidate in evidence.numbers:
        if written == 0 and candidate != 0:  # 0.4 rounds to 0, but "0 failures" is not what it says
            continue
        if candidate.scaleb(-scale).quantize(quantum, rounding=ROUND_HALF_UP) == written:
            return True
        if percent and (candidate * 100).quantize(quantum, rounding=ROUND_HALF_UP) == written:
            return True
    return False


def _word_supported(word: str, evidence: Evidence) -> bool:
    folded = word.casefold().strip(".'’-")
    if not folded or folded in COMMON_NAMES or folded in evidence.words:
        return True
    if any(folded.endswith(s) and folded[: -len(s)] in evidence.words for s in ("'s", "’s", "es", "s")):
        return True
    # a compound ("AWS-certified", "Houston-area"): its name-like parts (a capital or a digit) must be
    # evidence, its plain lower-case words need not be, as anywhere else
    parts = [p for p in word.split("-") if p]
    named = [p for p in parts if any(c.isupper() or c.isdigit() for c in p)]
    return len(parts) > 1 and named != parts and all(_word_supported(p, evidence) for p in named)


def check(answer: str, evidence: Evidence) -> Grounding:
    """Check every number, name and quoted string of ``answer`` against ``evidence``."""
    answer = normalize(answer)
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

    for match in _ADDRESS.finditer(answer):
        if any(start <= match.start() < end for start, end in spans):
            continue
        spans.append(match.span())
        address = match.group().rstrip(".,;:!?")
        result.names += 1
        if address.casefold() not in evidence.text:
            unsupported.append(address)

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
        spans.append(match.span())  # its scale word is not a spelled-out number of its own
        result.numbers += 1
        value = _value(match)
        suffix = (match["suffix"] or "").strip().casefold()
        places = len(match["decimals"]) - 1 if match["decimals"] else 0
        if value is None or not number_supported(
            value, places, suffix in ("%", "percent"), evidence, scale=_SCALES.get(suffix, 0)
        ):
            unsupported.append(match.group().strip())

    for match in _SPELLED.finditer(answer):
        if any(start <= match.start() < end or match.start() <= start < match.end() for start, end in spans):
            continue
        value = spelled_value(match.group())
        if value is None:
            continue
        result.numbers += 1
        if not number_supported(value, 0, False, evidence):
            unsupported.append(match.group())

    result.unsupported = list(dict.fromkeys(unsupported))[:MAX_REPORTED]
    result.grounded = not unsupported
    return result
