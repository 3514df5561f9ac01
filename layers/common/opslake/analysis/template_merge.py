"""Merging masked templates that differ only in a few word positions (pure logic, no I/O).

Masking (:mod:`opslake.analysis.masking`) stops at word-valued variables: ``no stock of blue
sneakers in Lyon`` and ``… in Paris`` are two templates, hence two signatures, one per city and
product. This module folds such templates into one whose variable positions read :data:`WILDCARD`
(``no stock of <*> sneakers in <*>``), working on the distinct templates the analyzer already
holds (one per signature), never on ops: its cost grows with templates.

As in Drain (He et al., ICWS 2017) and IPLoM (Makanju et al., KDD 2009), only templates of one
endpoint and error type with the same number of tokens are compared, token by token (the masking's
``<num>, ...`` list is one token). Unlike Drain's similarity threshold, which merges ``column x does
not exist`` with ``table x does not exist``, a position becomes variable only on evidence, in the
spirit of Brain (Yu et al., 2023) and Logram (Dai et al., 2020), which tell variables from constants
by how values recur:

* **one context, several values**: templates identical but for position ``p`` (their *context*)
  show at least :attr:`MergeRules.min_word_values` distinct values there (two when every value is
  already a masked placeholder such as ``<num>`` vs ``<hex>``: the masking said it varies). A word
  directly before a placeholder or a variable (``column <str>``, ``table <*>``) is the name of that
  value, a keyword: it never varies on this evidence alone;
* **two adjacent words that vary together** (a first and a last name, ``of Felix Becker:``): at
  least :attr:`MergeRules.min_word_values` distinct pairs in one context, every pair differing in
  both words (a word that stays while the other varies is judged alone);
* **the same variation in several contexts**: position ``p`` takes at least two values in each of
  :attr:`MergeRules.min_recurring_contexts` different raw contexts (blue/black sneakers in Lyon, in
  Paris and in Nice): two-valued variables that vary independently of the rest of the message.
  ``column``/``table`` never recur this way, because columns and tables have different names.

A merged template keeps at least :attr:`MergeRules.min_constant_words` constant tokens holding a
letter, and no more variable positions than constant ones ("a few word positions"). Templates that
already fit a merged one (equal wherever the merged one is not :data:`WILDCARD`) join it; two merged
templates that fit each other fold. The rules are the same for every endpoint and data set
(bench/README.md reports them on the Loghub-2k logs and on planted failures).

Known limits: a variable holding a varying number of words (``forklift operator``) is a different
token count, hence another template (Spell's longest common subsequence, Du and Li, ICDM 2016, would
align them, at the price of merging across structure); an enumeration of keywords that varies
independently of a word variable in three contexts (``cannot read``/``write`` for users alice, bob
and carol) merges.

Ids: a group keeps the id of one of its members, chosen by :func:`survivor_key`: a signature known
before this run first, a diagnosed one first, then the earliest seen, so a diagnosed signature keeps
its id when a new variant joins it. The analyzer exports the mapping (raw signature id → merged id)
as the ``signature_merges`` table, which every SQL that computes a signature consults through
:func:`merged_signature_sql`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from opslake.analysis.masking import PLACEHOLDERS

__all__ = [
    "DEFAULT_RULES",
    "MERGES_TABLE",
    "WILDCARD",
    "Candidate",
    "Merge",
    "MergeRules",
    "head_of",
    "matches",
    "merge_candidates",
    "merged_signature_sql",
    "survivor_key",
    "tokens",
]

#: What a merged template shows at a variable word position (Drain's and Loghub's placeholder: it is
#: no masking placeholder, so the masking's rules and the lesson fence never take it for one of theirs).
WILDCARD = "<*>"
#: The derived table of the merges: one row per raw signature id that belongs to a merged signature.
MERGES_TABLE = "signature_merges"

_PLACEHOLDER = f"<(?:{'|'.join(PLACEHOLDERS)})>"
_MASKED = re.compile(_PLACEHOLDER)
#: A token that starts with a value (used with .match): the word before it is that value's name.
_STARTS_WITH_VALUE = re.compile(rf"<\*>|{_PLACEHOLDER}")
#: Where a variable part of a token may begin or end: ``user=<*>``, ``[<*>]``, ``<*>;`` keep their
#: punctuation, never part of a word (``s<*>`` for sneakers and sandals would claim what is unknown).
_SEPARATORS = frozenset("=:,;()[]{}\"'")
# a token is a run of non-spaces, except the masking's list "<num>, ..." (one value, one token)
_TOKEN = re.compile(rf"[^ ]*{_PLACEHOLDER}, \.\.\.[^ ]*|[^ ]+")
_LETTER = re.compile("[A-Za-z]")

Pattern = tuple[str, ...]


@dataclass(frozen=True)
class MergeRules:
    """The evidence a merge needs (module docstring); one rule set for every endpoint."""

    min_word_values: int = 3
    min_masked_values: int = 2
    min_recurring_contexts: int = 3
    min_constant_words: int = 2
    max_template_chars: int = 1_000  # opslake.models.analysis.MAX_TEMPLATE_CHARS


DEFAULT_RULES = MergeRules()


@dataclass(frozen=True)
class Candidate:
    """A signature the merge may fold: its id, endpoint (normalized) and error type, its template
    (raw, or merged with :data:`WILDCARD`), the raw templates it stands for (``(raw id, raw
    template)``; a signature that was never merged stands for itself), when it was first seen,
    whether it existed before this run and whether it was diagnosed (both keep an id)."""

    signature_id: str
    endpoint: str
    error_type: str | None
    template: str
    first_seen: datetime
    raws: tuple[tuple[str, str], ...] = ()
    known: bool = False
    diagnosed: bool = False

    def members(self) -> tuple[tuple[str, str], ...]:
        return self.raws or ((self.signature_id, self.template),)


@dataclass(frozen=True)
class Merge:
    """Candidates folded into one signature: the survivor's id (:func:`survivor_key`), the merged
    template, the candidates folded (survivor first) and every raw template they stand for."""

    signature_id: str
    template: str
    candidates: tuple[str, ...]
    raws: tuple[tuple[str, str], ...]


def survivor_key(candidate: Candidate) -> tuple[bool, bool, datetime, str]:
    """The order in which a group's members claim its id: known before this run, diagnosed, first
    seen, smallest id (min wins)."""
    return (not candidate.known, not candidate.diagnosed, candidate.first_seen, candidate.signature_id)


def head_of(endpoint: str, error_type: str | None) -> str:
    """The part of a template before its error text (:func:`~opslake.analysis.masking.template_of`)."""
    return f"{endpoint} | {error_type or '-'}"


def tokens(text: str) -> Pattern:
    """The text's tokens: runs of non-spaces, the masking's ``<num>, ...`` list as one token."""
    return tuple(_TOKEN.findall(text))


def _split(template: str, head: str) -> Pattern | None:
    """The error text's tokens, or None when the template has no text or its text does not
    round-trip (it is then never merged)."""
    prefix = f"{head} | "
    if not template.startswith(prefix):
        return None
    text = template[len(prefix) :]
    found = tokens(text)
    return found if found and " ".join(found) == text else None


def _variable(token: str) -> bool:
    return WILDCARD in token


def _fixed(token: str) -> tuple[str, str]:
    """A token's fixed prefix and suffix: around its wildcard, or the whole token (a constant)."""
    before, found, after = token.partition(WILDCARD)
    return (before, after) if found else (token, token)


def _token_fits(general: str, token: str) -> bool:
    if general == token:
        return True
    if not _variable(general):
        return False
    before, after = _fixed(general)
    head, tail = _fixed(token)
    return (
        head.startswith(before)
        and tail.endswith(after)
        and (_variable(token) or len(token) >= len(before) + len(after))
    )


def matches(pattern: Sequence[str], raw: Sequence[str]) -> bool:
    """Whether ``raw`` fits ``pattern``: same length, equal wherever the pattern is constant, and
    with a variable token's punctuation around its value (``user=root`` fits ``user=<*>``)."""
    return len(pattern) == len(raw) and all(_token_fits(p, r) for p, r in zip(pattern, raw, strict=True))


def merged_signature_sql(raw_expr: str, table: str = MERGES_TABLE) -> str:
    """Athena SQL: the signature a raw signature id (the varchar ``raw_expr``) belongs to, itself
    when it was never merged. A correlated scalar subquery with an equality predicate, aggregated
    so it returns one row (Trino plans it as a left join; DuckDB too); ``raw_expr`` should be a
    column or a cheap expression, since it appears twice, and must qualify a column named like one
    of the table's (``r.raw_signature_id``): unqualified, the subquery's own column would answer."""
    return (
        f"coalesce((SELECT max(sig_merge.signature_id) FROM {table} sig_merge "
        f"WHERE sig_merge.raw_signature_id = {raw_expr}), {raw_expr})"
    )


# -- the merge -------------------------------------------------------------------------------------
def _masked(token: str) -> bool:
    return _MASKED.search(token) is not None


def _constant_word(token: str) -> bool:
    return not _variable(token) and _LETTER.search(_MASKED.sub("", token)) is not None


def _common_prefix(texts: Sequence[str]) -> str:
    first, last = min(texts), max(texts)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


def _variable_token(column: Sequence[str]) -> str:
    """The token that stands for several: :data:`WILDCARD` with the punctuation they all share
    before and after their values (``user=root``, ``user=git`` → ``user=<*>``)."""
    heads = [_fixed(t)[0] for t in column]
    tails = [_fixed(t)[1][::-1] for t in column]
    before = _common_prefix(heads)
    after = _common_prefix(tails)[::-1]
    cut = max((i + 1 for i, c in enumerate(before) if c in _SEPARATORS), default=0)
    before = before[:cut]
    cut = min((i for i, c in enumerate(after) if c in _SEPARATORS), default=len(after))
    after = after[cut:]
    shortest = min((len(t) for t in column if not _variable(t)), default=len(before) + len(after))
    if len(before) + len(after) > shortest:  # "a=;" and "a=b;": the affixes may not overlap
        before, after = "", ""
    return f"{before}{WILDCARD}{after}"


@dataclass
class _Cluster:
    key: str  # the smallest candidate id in it (a stable name while merging)
    pattern: Pattern
    candidates: list[str]
    raws: list[Pattern] = field(default_factory=list)


class _Family:
    """The templates of one endpoint, error type and token count: the only ones compared."""

    def __init__(self, head: str, rules: MergeRules) -> None:
        self.head = head
        self.rules = rules
        self.clusters: dict[str, _Cluster] = {}

    def acceptable(self, pattern: Pattern) -> bool:
        wild = sum(1 for t in pattern if _variable(t))
        words = sum(1 for t in pattern if _constant_word(t))
        long = len(self.head) + 3 + sum(len(t) + 1 for t in pattern) - 1
        return (
            words >= self.rules.min_constant_words
            and wild <= len(pattern) - wild
            and long <= self.rules.max_template_chars
        )

    def _is_label(self, context: Pattern, p: int) -> bool:
        """The token at ``p`` names the value that follows it (a placeholder or a variable)."""
        return p + 1 < len(context) and _STARTS_WITH_VALUE.match(context[p + 1]) is not None

    def _recurs(self, members: Iterable[_Cluster], p: int) -> bool:
        """Position ``p`` takes two or more values in enough distinct raw contexts."""
        values: dict[Pattern, set[str]] = defaultdict(set)
        for cluster in members:
            for raw in cluster.raws:
                values[raw[:p] + raw[p + 1 :]].add(raw[p])
        return sum(1 for found in values.values() if len(found) > 1) >= self.rules.min_recurring_contexts

    def _evident(self, context: Pattern, p: int, members: list[_Cluster]) -> bool:
        values = {c.pattern[p] for c in members}
        if len(values) < 2 or not self.acceptable(context):
            return False
        if all(_masked(v) for v in values):
            return len(values) >= self.rules.min_masked_values
        if len(values) >= self.rules.min_word_values and not self._is_label(context, p):
            return True
        return self._recurs(members, p)

    def _evident_span(self, context: Pattern, p: int, members: list[_Cluster]) -> bool:
        """Two adjacent words that vary together (a person's first and last name, ``Felix
        Becker:``): at least :attr:`MergeRules.min_word_values` distinct pairs in one context,
        neither word naming the value after the pair, both words in every pair differing."""
        pairs = {c.pattern[p : p + 2] for c in members}
        firsts, seconds = {a for a, _ in pairs}, {b for _, b in pairs}
        return (
            len(pairs) >= self.rules.min_word_values
            and len(firsts) == len(pairs) == len(seconds)
            and not self._is_label(context, p + 1)
            and self.acceptable(context)
        )

    def evidence_round(self) -> bool:
        """Fold the clusters that share a context in which a position shows evidence of varying.
        Every bucket is judged on the same clusters; overlapping buckets fold together (union-find)
        when the generalized template is still acceptable, strongest evidence first."""
        clusters = sorted(self.clusters.values(), key=lambda c: c.key)
        if len(clusters) < 2:
            return False
        width = len(clusters[0].pattern)
        # only positions where the family holds two or more tokens can vary
        varying = [p for p in range(width) if len({c.pattern[p] for c in clusters}) > 1]
        buckets: dict[tuple[int, Pattern], list[_Cluster]] = defaultdict(list)
        spans: dict[tuple[int, Pattern], list[_Cluster]] = defaultdict(list)
        for cluster in clusters:
            for p in varying:
                if not _variable(cluster.pattern[p]):
                    context = (*cluster.pattern[:p], WILDCARD, *cluster.pattern[p + 1 :])
                    buckets[(p, context)].append(cluster)
                if (
                    p + 1 in varying
                    and not _variable(cluster.pattern[p])
                    and not _variable(cluster.pattern[p + 1])
                ):
                    context = (*cluster.pattern[:p], WILDCARD, WILDCARD, *cluster.pattern[p + 2 :])
                    spans[(p, context)].append(cluster)
        found = [
            (-len({c.pattern[p] for c in members}), p, context, members)
            for (p, context), members in buckets.items()
            if len(members) > 1 and self._evident(context, p, members)
        ] + [
            (-len({c.pattern[p : p + 2] for c in members}), p, context, members)
            for (p, context), members in spans.items()
            if len(members) > 1 and self._evident_span(context, p, members)
        ]
        if not found:
            return False
        found.sort(key=lambda f: (f[0], f[1], f[2]))
        parent = {c.key: c.key for c in clusters}
        pattern = {c.key: c.pattern for c in clusters}

        def root(key: str) -> str:
            while parent[key] != key:
                parent[key] = parent[parent[key]]
                key = parent[key]
            return key

        changed = False
        for _, _, _, members in found:
            roots = sorted({root(c.key) for c in members})
            if len(roots) < 2:
                continue
            merged = _generalize([pattern[r] for r in roots])
            if not self.acceptable(merged):
                continue
            for other in roots[1:]:
                parent[other] = roots[0]
            pattern[roots[0]] = merged
            changed = True
        if changed:
            groups: dict[str, list[str]] = defaultdict(list)
            for cluster in clusters:
                groups[root(cluster.key)].append(cluster.key)
            for top, keys in groups.items():
                if len(keys) > 1:
                    self._fold(keys, pattern[top])
        return changed

    def fit_round(self) -> bool:
        """Fold clusters into a merged one they fit (equal wherever either is not a wildcard): a new
        variant joins the merged signature it matches; two merged templates that agree fold."""
        changed = False
        for general in sorted(self.clusters.values(), key=lambda c: c.key):
            # a cluster folded earlier in this round is gone (its key may name the fold now)
            if self.clusters.get(general.key) is not general or not any(
                _variable(t) for t in general.pattern
            ):
                continue
            current = general
            for other in sorted(self.clusters.values(), key=lambda c: c.key):
                if other is current or self.clusters.get(other.key) is not other:
                    continue
                merged = _fit(current.pattern, other.pattern)
                if merged is not None and self.acceptable(merged):
                    current = self._fold([current.key, other.key], merged)
                    changed = True
        return changed

    def _fold(self, keys: Sequence[str], pattern: Pattern) -> _Cluster:
        parts = [self.clusters.pop(k) for k in keys]
        cluster = _Cluster(
            key=min(keys),
            pattern=pattern,
            candidates=[c for part in parts for c in part.candidates],
            raws=[r for part in parts for r in part.raws],
        )
        self.clusters[cluster.key] = cluster
        return cluster


def _generalize(patterns: Sequence[Pattern]) -> Pattern:
    return tuple(
        column[0] if len(set(column)) == 1 else _variable_token(column)
        for column in zip(*patterns, strict=True)
    )


def _fit(a: Pattern, b: Pattern) -> Pattern | None:
    """The more general of ``a`` and ``b`` at each position where one covers the other, or None
    when neither does somewhere (they differ in a constant: only evidence may fold them)."""
    out = []
    for x, y in zip(a, b, strict=True):
        if _token_fits(x, y):
            out.append(x)
        elif _token_fits(y, x):
            out.append(y)
        else:
            return None
    return tuple(out)


def merge_candidates(candidates: Iterable[Candidate], rules: MergeRules = DEFAULT_RULES) -> list[Merge]:
    """The groups of two or more candidates that fold into one signature, each with its survivor's
    id and merged template; a candidate in no group stays as it is. Deterministic: the result
    depends on the candidates, not on their order."""
    by_id = {c.signature_id: c for c in candidates}
    families: dict[tuple[str, int], _Family] = {}
    for cid in sorted(by_id):
        candidate = by_id[cid]
        head = head_of(candidate.endpoint, candidate.error_type)
        pattern = _split(candidate.template, head)
        if pattern is None:
            continue
        raws = [_split(raw, head) for _, raw in candidate.members()]
        if any(r is None or len(r) != len(pattern) or not matches(pattern, r) for r in raws):
            continue  # its raw templates do not fit its own: leave it alone
        family = families.setdefault((head, len(pattern)), _Family(head, rules))
        family.clusters[cid] = _Cluster(cid, pattern, [cid], [r for r in raws if r is not None])
    merges: list[Merge] = []
    for (head, _), family in sorted(families.items()):
        while family.evidence_round() | family.fit_round():
            pass
        for cluster in family.clusters.values():
            if len(cluster.candidates) < 2:
                continue
            members = sorted((by_id[c] for c in cluster.candidates), key=survivor_key)
            merges.append(
                Merge(
                    signature_id=members[0].signature_id,
                    template=f"{head} | {' '.join(cluster.pattern)}",
                    candidates=tuple(m.signature_id for m in members),
                    raws=tuple(raw for m in members for raw in m.members()),
                )
            )
    return sorted(merges, key=lambda m: m.signature_id)
