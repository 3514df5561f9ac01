"""Failure signatures: one template per problem, whatever ids, numbers and names it carries.

An error message is *normalized* by masking its variable parts (UUIDs, timestamps, numbers,
quoted names, paths, ids …) with placeholders, so that ``Column 'salry' cannot be resolved`` and
``Column 'ratng' cannot be resolved`` give one template. The template of a failure is its
endpoint, its error type and its normalized error; the signature id is a hash of the template.
The rules live in :mod:`opslake.analysis.masking`, which also writes them as SQL: the analyzer
computes templates in the engine, and these Python functions give the same text.

Templates of one endpoint and error type that differ only in a few word positions (a city, a role)
are then merged into one signature (:mod:`opslake.analysis.template_merge`): :func:`merge_variants`
folds them over the signatures the analyzer keeps, and the raw ids it folded are kept as
:class:`MergedRaw` (the ``signature_merges`` table).

Pure logic (no I/O): counting, merging and diagnosis selection over signatures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, NamedTuple

from opslake.analysis.masking import (
    MAX_NORMALIZED_CHARS,
    MAX_SCANNED_CHARS,
    SIGNATURE_PREFIX,
    VARIANT_CHARS,
    input_template,
    normalize,
    normalize_endpoint,
    signature_id,
    template_of,
    variant_of,
)
from opslake.analysis.reporters import ReporterTrust, admits, witness_key
from opslake.analysis.template_merge import DEFAULT_RULES, Candidate, MergeRules, merge_candidates
from opslake.models.analysis import (
    MAX_SAMPLE_OP_IDS,
    MAX_TRACKED_AGENTS,
    FailureRow,
    FailureSample,
    Signature,
    SignatureAggregate,
)

__all__ = [
    "MAX_NORMALIZED_CHARS",
    "MAX_SCANNED_CHARS",
    "MAX_VARIANTS",
    "SIGNATURE_PREFIX",
    "VARIANT_CHARS",
    "MergedRaw",
    "NewTemplate",
    "OpKey",
    "Reason",
    "SignatureIndex",
    "VariantMerge",
    "apply_failures",
    "fold_signature",
    "input_template",
    "mark_diagnosed",
    "merge_aggregate",
    "merge_variants",
    "merged_id",
    "needs_diagnosis",
    "normalize",
    "normalize_endpoint",
    "select_for_diagnosis",
    "signature_id",
    "template_of",
    "variant_of",
]

#: An op's identity: (``reporter_id``, ``op_id``), as the lake deduplicates (opslake.lake.opkey).
OpKey = tuple[str | None, str]
MAX_VARIANTS = 50  # distinct input variants kept per signature

Reason = Literal["new", "merged", "grown", "new_variants"]

_CACHE_LIMIT = 100_000


class SignatureIndex:
    """Assigns failures to signatures and keeps the signatures' statistics.

    ``signatures`` (signature id → :class:`Signature`) is updated in place, so the analyzer can
    hand in its state object's dict. Templates are cached per (endpoint, error type, error), so a
    repeated message is normalized once. ``trust`` says what each failure's API key counts as
    (:mod:`opslake.analysis.reporters`): every failure is counted, but only trusted keys are
    independent reporters, the count a diagnosis needs before it may become an "avoid" entry.
    """

    def __init__(
        self, signatures: dict[str, Signature] | None = None, *, trust: ReporterTrust | None = None
    ) -> None:
        self.signatures: dict[str, Signature] = {} if signatures is None else signatures
        self.trust = trust or ReporterTrust()
        self._templates: dict[tuple[str, str | None, str | None], tuple[str, str]] = {}
        self._variants: dict[str | None, str] = {}
        self._agents: dict[str, set[str]] = {}
        self._reporters: dict[str, set[str]] = {}
        self._variant_sets: dict[str, set[str]] = {}

    def signature_of(self, endpoint: str, error_type: str | None, error: str | None) -> tuple[str, str]:
        """(signature id, template) of a failure."""
        key = (endpoint, error_type, error)
        found = self._templates.get(key)
        if found is None:
            if len(self._templates) >= _CACHE_LIMIT:
                self._templates.clear()
            template = template_of(endpoint, error_type, error)
            found = self._templates[key] = (signature_id(template), template)
        return found

    def _variant(self, input_summary: str | None) -> str:
        found = self._variants.get(input_summary)
        if found is None:
            if len(self._variants) >= _CACHE_LIMIT:
                self._variants.clear()
            found = self._variants[input_summary] = variant_of(input_summary)
        return found

    def apply(
        self, failures: Iterable[FailureSample], *, count: bool | Set[OpKey] = True
    ) -> list[FailureRow]:
        """The failure row of each failure (each gets exactly one signature).

        ``count`` says which failures update the statistics: all (``True``), none (``False``: the
        caller re-assigns failures it has already counted) or those whose (``reporter_id``,
        ``op_id``) is in the set (op ids are unique per API key only).
        A signature first met by a failure that is not counted is created empty (count 0), so that
        every failure row refers to a known signature.
        """
        rows: list[FailureRow] = []
        for failure in failures:
            sig_id, template = self.signature_of(failure.endpoint, failure.error_type, failure.error)
            sig = self.signatures.get(sig_id)
            if sig is None:
                sig = self.signatures[sig_id] = Signature(
                    signature_id=sig_id,
                    endpoint=normalize_endpoint(failure.endpoint),
                    error_type=failure.error_type,
                    template=template,
                    first_seen=failure.ts,
                    last_seen=failure.ts,
                )
            if count if isinstance(count, bool) else (failure.reporter_id, failure.op_id) in count:
                self._count(sig, failure)
            # the fields come from a validated FailureSample and a signature id built here
            rows.append(
                FailureRow.model_construct(
                    op_id=failure.op_id,
                    reporter_id=failure.reporter_id,
                    signature_id=sig_id,
                    endpoint=failure.endpoint,
                    agent_id=failure.agent_id,
                    error_type=failure.error_type,
                    ts=failure.ts,
                    ingested_at=failure.ingested_at,
                )
            )
        return rows

    def _count(self, sig: Signature, failure: FailureSample) -> None:
        if sig.count == 0:
            sig.first_seen = sig.last_seen = failure.ts
        elif failure.ts < sig.first_seen:
            sig.first_seen = failure.ts
        elif failure.ts > sig.last_seen:
            sig.last_seen = failure.ts
        sig.count += 1
        agents = self._agents.get(sig.signature_id)
        if agents is None:
            agents = self._agents[sig.signature_id] = set(sig.agents)
        if failure.agent_id not in agents and len(agents) < MAX_TRACKED_AGENTS:
            agents.add(failure.agent_id)
            sig.agents.append(failure.agent_id)
        # saturates at MAX_TRACKED_AGENTS: beyond it a new agent cannot be told from a known one
        sig.agent_count = max(sig.agent_count, len(sig.agents))
        witness = self.trust.witness(failure.reporter_id, failure.agent_id)
        if witness is not None:
            reporters = self._reporters.get(sig.signature_id)
            if reporters is None:
                reporters = self._reporters[sig.signature_id] = set(sig.reporters)
            if admits(reporters, witness):  # per key first: one runtime key cannot crowd others out
                reporters.add(witness)
                sig.reporters.append(witness)
                sig.reporter_count = self.trust.count(sig.reporters)
        variants = self._variant_sets.get(sig.signature_id)
        if variants is None:
            variants = self._variant_sets[sig.signature_id] = set(sig.variants)
        if len(variants) < MAX_VARIANTS:
            variant = self._variant(failure.input_summary)
            if variant not in variants:
                variants.add(variant)
                sig.variants.append(variant)
        if len(sig.sample_op_ids) < MAX_SAMPLE_OP_IDS and failure.op_id not in sig.sample_op_ids:
            sig.sample_op_ids.append(failure.op_id)


def apply_failures(
    signatures: dict[str, Signature], failures: Iterable[FailureSample], *, count: bool | Set[OpKey] = True
) -> list[FailureRow]:
    """:meth:`SignatureIndex.apply` for a one-off batch."""
    return SignatureIndex(signatures).apply(failures, count=count)


def merge_aggregate(
    signatures: dict[str, Signature],
    agg: SignatureAggregate,
    *,
    trust: ReporterTrust | None = None,
    count: bool = True,
) -> Signature:
    """Merge one template's aggregated failures into its signature (created if new), as
    :meth:`SignatureIndex.apply` counts failures one by one: count, first/last seen, up to
    :data:`MAX_TRACKED_AGENTS` agents (the count saturates there), reporters admitted per key
    (:func:`~opslake.analysis.reporters.admits`), up to :data:`MAX_VARIANTS` variants and
    :data:`MAX_SAMPLE_OP_IDS` sample op ids. The aggregate's lists are sorted, so what is kept when
    a cap is reached is the same on every engine. With ``count=False`` a new signature is created
    empty (count 0) and an existing one is left alone."""
    sig = signatures.get(agg.signature_id)
    if sig is None:
        sig = signatures[agg.signature_id] = Signature(
            signature_id=agg.signature_id,
            endpoint=agg.endpoint,
            error_type=agg.error_type,
            template=agg.template,
            first_seen=agg.first_seen,
            last_seen=agg.last_seen,
        )
    if not count:
        return sig
    if sig.count == 0:
        sig.first_seen, sig.last_seen = agg.first_seen, agg.last_seen
    else:
        sig.first_seen = min(sig.first_seen, agg.first_seen)
        sig.last_seen = max(sig.last_seen, agg.last_seen)
    sig.count += agg.count
    _extend(sig.agents, agg.agents, MAX_TRACKED_AGENTS)
    sig.agent_count = max(sig.agent_count, len(sig.agents))
    trust = trust or ReporterTrust()
    admitted = False
    for witness in agg.witnesses:
        if trust.counts(witness_key(witness)) and admits(sig.reporters, witness):
            sig.reporters.append(witness)
            admitted = True
    if admitted:
        sig.reporter_count = trust.count(sig.reporters)
    _extend(sig.variants, agg.variants, MAX_VARIANTS)
    _extend(sig.sample_op_ids, agg.sample_op_ids, MAX_SAMPLE_OP_IDS)
    return sig


def fold_signature(into: Signature, other: Signature, *, trust: ReporterTrust | None = None) -> None:
    """Add ``other``'s statistics to ``into`` (its word variant, merged into it): counts summed,
    first/last seen, agents, reporters, variants and sample op ids within their caps, as
    :func:`merge_aggregate` adds a window's. ``into`` keeps its own diagnosis history."""
    if other.count:
        if into.count == 0:
            into.first_seen, into.last_seen = other.first_seen, other.last_seen
        else:
            into.first_seen = min(into.first_seen, other.first_seen)
            into.last_seen = max(into.last_seen, other.last_seen)
    into.count += other.count
    _extend(into.agents, other.agents, MAX_TRACKED_AGENTS)
    into.agent_count = max(into.agent_count, other.agent_count, len(into.agents))
    admitted = False
    for witness in other.reporters:
        if admits(into.reporters, witness):
            into.reporters.append(witness)
            admitted = True
    if admitted:
        into.reporter_count = (trust or ReporterTrust()).count(into.reporters)
    _extend(into.variants, other.variants, MAX_VARIANTS)
    _extend(into.sample_op_ids, other.sample_op_ids, MAX_SAMPLE_OP_IDS)


class MergedRaw(NamedTuple):
    """A raw signature folded into a merged one: the merged signature's id and the raw template."""

    signature_id: str
    template: str


class NewTemplate(NamedTuple):
    """A template first met in this run (a raw signature id the analyzer does not know yet)."""

    signature_id: str
    endpoint: str
    error_type: str | None
    template: str
    first_seen: datetime


@dataclass
class VariantMerge:
    """What :func:`merge_variants` changed: signatures folded into others (absorbed id → survivor)
    and the survivors whose template changed."""

    absorbed: dict[str, str] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)


def merge_variants(
    signatures: dict[str, Signature],
    merged: dict[str, MergedRaw],
    new: Iterable[NewTemplate],
    *,
    trust: ReporterTrust | None = None,
    rules: MergeRules = DEFAULT_RULES,
) -> VariantMerge:
    """Merge the word variants among the known signatures and the run's new templates, in place.

    ``signatures`` (id → signature, merged ones under their survivor's id with the merged template)
    and ``merged`` (raw id → :class:`MergedRaw`, every raw id of a merged signature, its survivor's
    own included) are the analyzer's state. A group of candidates
    (:func:`~opslake.analysis.template_merge.merge_candidates`) keeps its survivor's id; the other
    known signatures are folded into it (:func:`fold_signature`) and removed; a new template only
    gets an entry in ``merged``, its failures are added by the caller under
    :func:`merged_id`. A diagnosed signature whose template changes is diagnosed again
    (:func:`needs_diagnosis`: ``merged``)."""
    members: dict[str, list[tuple[str, str]]] = {}
    for raw, found in sorted(merged.items()):
        members.setdefault(found.signature_id, []).append((raw, found.template))
    candidates = [
        Candidate(
            signature_id=sid,
            endpoint=sig.endpoint,
            error_type=sig.error_type,
            template=sig.template,
            first_seen=sig.first_seen,
            raws=tuple(members.get(sid, ())),
            known=True,
            diagnosed=sig.diagnoses > 0,
        )
        for sid, sig in signatures.items()
    ]
    seen = set(signatures) | set(merged)
    for item in new:  # the first of a template's rows: the caller sorts them by first seen
        if item.signature_id not in seen:
            seen.add(item.signature_id)
            candidates.append(
                Candidate(item.signature_id, item.endpoint, item.error_type, item.template, item.first_seen)
            )
    by_id = {c.signature_id: c for c in candidates}
    outcome = VariantMerge()
    for group in merge_candidates(by_id.values(), rules):
        survivor = signatures.get(group.signature_id)
        if survivor is None:  # every member is new: the survivor starts empty, the caller counts
            first = by_id[group.signature_id]
            survivor = signatures[group.signature_id] = Signature(
                signature_id=group.signature_id,
                endpoint=first.endpoint,
                error_type=first.error_type,
                template=group.template,
                first_seen=first.first_seen,
                last_seen=first.first_seen,
            )
        for other in group.candidates[1:]:
            absorbed = signatures.pop(other, None)
            if absorbed is not None:
                fold_signature(survivor, absorbed, trust=trust)
                outcome.absorbed[other] = group.signature_id
        if survivor.template != group.template:
            if survivor.diagnoses and survivor.diagnosed_template is None:
                survivor.diagnosed_template = survivor.template  # diagnosed before templates merged
            survivor.template = group.template
            outcome.changed.append(group.signature_id)
        for raw, template in group.raws:
            merged[raw] = MergedRaw(group.signature_id, template)
    return outcome


def merged_id(merged: Mapping[str, MergedRaw], raw_signature_id: str) -> str:
    """The signature a raw signature id counts under: its merged signature, else itself."""
    found = merged.get(raw_signature_id)
    return raw_signature_id if found is None else found.signature_id


def _extend(kept: list[str], new: Iterable[str], limit: int) -> None:
    """Append the values of ``new`` not yet in ``kept`` while it holds fewer than ``limit``."""
    known = set(kept)
    for value in new:
        if len(kept) >= limit:
            return
        if value not in known:
            known.add(value)
            kept.append(value)


def needs_diagnosis(
    sig: Signature, *, growth_factor: float = 2.0, min_growth: int = 10, min_new_variants: int = 2
) -> Reason | None:
    """Why ``sig`` should be (re)diagnosed, or None.

    * ``new``: it has failures and was never diagnosed;
    * ``merged``: its template changed since its last diagnosis (word variants were merged into it);
    * ``grown``: it has at least ``growth_factor`` times the failures it had when last diagnosed,
      and at least ``min_growth`` more;
    * ``new_variants``: it is reached through ``min_new_variants`` or more input variants that
      it did not have when last diagnosed (and has new failures).
    """
    if sig.count == 0:
        return None
    if sig.diagnoses == 0 and sig.last_diagnosed_at is None:
        return "new"
    if sig.diagnosed_template is not None and sig.template != sig.diagnosed_template:
        return "merged"
    grown = sig.count - sig.diagnosed_count
    if sig.count >= sig.diagnosed_count * growth_factor and grown >= min_growth:
        return "grown"
    if grown > 0 and len(sig.variants) - sig.diagnosed_variants >= min_new_variants:
        return "new_variants"
    return None


def select_for_diagnosis(
    signatures: Iterable[Signature] | Mapping[str, Signature],
    budget: int,
    *,
    growth_factor: float = 2.0,
    min_growth: int = 10,
    min_new_variants: int = 2,
) -> list[tuple[Signature, Reason]]:
    """At most ``budget`` signatures that need a diagnosis, most frequent first (ties by id)."""
    if budget <= 0:
        return []
    values = signatures.values() if isinstance(signatures, Mapping) else signatures
    chosen: list[tuple[Signature, Reason]] = []
    for sig in sorted(values, key=lambda s: (-s.count, s.signature_id)):
        reason = needs_diagnosis(
            sig, growth_factor=growth_factor, min_growth=min_growth, min_new_variants=min_new_variants
        )
        if reason is not None:
            chosen.append((sig, reason))
            if len(chosen) >= budget:
                break
    return chosen


def mark_diagnosed(sig: Signature, *, diagnosis_id: str, at: datetime) -> None:
    """Record on ``sig`` that it was diagnosed at ``at`` (a UTC datetime): what
    :func:`needs_diagnosis` compares with next time."""
    sig.diagnosed_count = sig.count
    sig.diagnosed_variants = len(sig.variants)
    sig.diagnosed_template = sig.template
    sig.diagnoses += 1
    sig.last_diagnosed_at = at
    sig.last_diagnosis_id = diagnosis_id
