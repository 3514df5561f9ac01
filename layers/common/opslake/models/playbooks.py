"""The playbook contract: entries the consolidator distils from repeated successes, ``/log``
lessons and the analyzer's "avoid" diagnoses, and the one snapshot object
(``s3://<lake>/playbooks/current.json``) that ``GET /playbooks`` serves.

:class:`EntryDraft` is what a distiller (the LLM or the heuristic) must answer; it is also the
JSON schema sent to the model. :class:`PlaybookEntry` is one row of the ``playbooks`` table: the
draft plus its provenance (evidence, independent reporters, claimed agents, source), its lifecycle
(``proposed`` → ``active`` → ``retired``) and its holdout experiment. Only ``active`` entries are
ever served; an entry whose evidence comes from fewer than ``playbook_min_reporters`` independent
reporters stays ``proposed`` until an operator approves it (``approved_at``).
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# MAX_WITNESS_CHARS from ops, not analysis: /playbooks and /log would build analysis' models for one constant
from opslake.models.ops import MAX_WITNESS_CHARS, Id, UtcMs

MAX_TRIGGER_CHARS = 80
MAX_ACTION_CHARS = 120
MAX_EXCERPT_CHARS = 300
MAX_EVIDENCE = 50
MAX_DRAFT_EXCERPTS = 3
MAX_TRACKED_AGENTS = 200  # distinct agents kept per entry; the count saturates beyond
MAX_GROUP_KEY_CHARS = 500

EntryKind = Literal["do", "avoid"]
EntryScope = Literal["project", "global"]
# "candidate" is the legacy name of "proposed" (kept so older snapshots still parse; never served).
EntryStatus = Literal["candidate", "proposed", "active", "retired"]
EntrySource = Literal["successes", "log", "diagnosis", "contrast"]
#: A holdout experiment's stage: ``new`` entries are withheld from a large share of readers,
#: ``graduated`` ones (helpful with confidence, twice in a row) from a small permanent share.
ExperimentStage = Literal["new", "graduated"]
Verdict = Literal["helpful", "harmful", "no_effect", "undecided", "insufficient"]
RetiredReason = Literal["harmful", "no_effect", "operator", "merged"]
#: What a contrast of failures with successes found to differ (:mod:`opslake.analysis.playbooks.contrast`).
FixKind = Literal[
    "value_shape", "missing_argument", "extra_argument", "preceding_call", "recovery", "error_rule",
    "column", "aggregate", "json_body", "prompt_bound",
    "fields", "id_format", "id_source",  # before the catalog: missing_argument, value_shape, preceding_call now
]  # fmt: skip
Arm = Literal["treatment", "holdout"]
HOLDOUT_SALT = "opslake-holdout-v1"
HOLDOUT_NEW = 0.5
HOLDOUT_GRADUATED = 0.05
MAX_INSTEAD_OF_CHARS = 120
MAX_FIX_NAMES = 8  # the concrete names one contrast fix may carry (a fix needing more is not stated)
Confidence = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Rate = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]
Trigger = Annotated[
    str, Field(min_length=1, max_length=MAX_TRIGGER_CHARS, description="when the advice applies")
]
Action = Annotated[str, Field(min_length=1, max_length=MAX_ACTION_CHARS, description="what to do (or avoid)")]
InsteadOf = Annotated[
    str,
    Field(min_length=1, max_length=MAX_INSTEAD_OF_CHARS, description="the failing form the action replaces"),
]
Excerpt = Annotated[str, Field(min_length=1, max_length=MAX_EXCERPT_CHARS)]
Witness = Annotated[str, Field(min_length=1, max_length=MAX_WITNESS_CHARS)]

#: ``POST /log`` records carry ``attributes.log_format``: each part of the report in its own place
#: (operation and result in attributes, the approach as ``input_summary``, the context as
#: ``output_summary``). Records without it were written before, packed as "operation: approach"
#: and "result: context", and are unpacked once, where the consolidator reads them (``LogRow``).
LOG_FORMAT_ATTRIBUTE = "log_format"
LOG_FORMAT = "2"


class EntryDraft(BaseModel):
    """What a distiller (model or heuristic) must answer for one candidate group; also the JSON
    schema sent to the model (``extra="forbid"``: an answer with anything else is invalid)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trigger: Trigger
    action: Action
    kind: EntryKind = Field(description="do: repeat what worked; avoid: a pattern that fails")
    confidence: Confidence
    instead_of: InsteadOf | None = None
    domain: Annotated[
        str,
        Field(
            min_length=1,
            max_length=40,
            pattern=r"^[a-z][a-z0-9_]*$",
            description="e.g. sql, staffing, search",
        ),
    ]
    scope: EntryScope = Field(description="project: this lake's data and tools; global: any agent anywhere")
    evidence_excerpts: Annotated[
        list[Excerpt],
        Field(min_length=1, max_length=MAX_DRAFT_EXCERPTS, description="1-3 short quotes of the evidence"),
    ]


class PlaybookEntry(BaseModel):
    """One piece of advice: when ``trigger`` holds, ``do`` (or ``avoid``) ``action``."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    entry_id: Id
    trigger: Trigger
    action: Action
    kind: EntryKind
    confidence: Confidence
    domain: Id = Field(description="what the advice is about, e.g. sql, staffing, search")
    scope: EntryScope = "project"
    endpoint: Id | None = None
    task_class: Id | None = None
    signature_id: Id | None = Field(default=None, description="the failure signature an avoid entry is about")
    group_key: Annotated[str, Field(max_length=MAX_GROUP_KEY_CHARS)] | None = Field(
        default=None, description="stable key of what the entry is about (merging near-duplicates)"
    )
    source: EntrySource | None = None
    distilled_by: Id | None = Field(default=None, description="the model's name, or 'heuristic'")
    evidence_op_ids: Annotated[list[Id], Field(max_length=MAX_EVIDENCE)] = Field(default_factory=list)
    evidence_excerpts: Annotated[list[Excerpt], Field(max_length=MAX_EVIDENCE)] = Field(default_factory=list)
    evidence_agents: Annotated[list[Id], Field(max_length=MAX_TRACKED_AGENTS)] = Field(default_factory=list)
    evidence_agent_count: Count = Field(
        default=0, description="distinct claimed agent_ids behind the evidence"
    )
    evidence_reporters: Annotated[list[Witness], Field(max_length=MAX_TRACKED_AGENTS)] = Field(
        default_factory=list,
        description="the independent reporters behind the evidence: API key names (key/agent for a runtime key)",
    )
    evidence_reporter_count: Count = Field(
        default=0, description="independent reporters behind the evidence, by the keys' trust levels"
    )
    status: EntryStatus = "candidate"
    created_at: UtcMs
    updated_at: UtcMs | None = None
    published_at: UtcMs | None = Field(default=None, description="when it became active (served)")
    approved_at: UtcMs | None = Field(
        default=None, description="when an operator approved it (served whatever its evidence)"
    )
    fence_override_reason: str | None = Field(
        default=None,
        description="the lesson fence's refusal an operator overrode to approve it (None: not overridden)",
    )
    retired_at: UtcMs | None = None
    retired_reason: RetiredReason | None = None
    merged_into: Id | None = Field(default=None, description="the entry a merge folded this one into")
    instead_of: InsteadOf | None = None
    fix_kind: FixKind | None = None
    fix_names: Annotated[list[Id], Field(max_length=MAX_FIX_NAMES)] = Field(
        default_factory=list,
        description="the concrete names of a contrast fix (argument, form, preceding tool, table, column)",
    )
    fix_failures: Count | None = Field(default=None, description="the failing calls the contrast found")
    fix_successes: Count | None = Field(default=None, description="the successful calls that back its fix")
    revision: Count = Field(default=0, description="edits recorded as deltas (table playbook_deltas)")
    # holdout experiment (analysis/playbooks/experiment.py): treatment vs holdout over the lookback
    experiment_stage: ExperimentStage = "new"
    holdout_share: Rate = HOLDOUT_NEW
    experiment_started_at: UtcMs | None = None
    graduated_at: UtcMs | None = None
    treatment_units: Count | None = None
    holdout_units: Count | None = None
    treatment_ops: Count | None = None
    treatment_failures: Count | None = None
    holdout_ops: Count | None = None
    holdout_failures: Count | None = None
    treatment_sig_failures: Count | None = None
    holdout_sig_failures: Count | None = None
    treatment_rate: Rate | None = None
    treatment_rate_low: Rate | None = None
    treatment_rate_high: Rate | None = None
    holdout_rate: Rate | None = None
    holdout_rate_low: Rate | None = None
    holdout_rate_high: Rate | None = None
    effect: float | None = Field(default=None, description="holdout_rate - treatment_rate (> 0: it helps)")
    effect_low: float | None = None
    effect_high: float | None = None
    design_effect: float | None = None
    helpful_count: Count = 0
    harmful_count: Count = 0
    neutral_count: Count = 0
    helpful_streak: Count = 0
    last_verdict: Verdict | None = None
    judged_at: UtcMs | None = None
    judged_treatment_ops: Count | None = None
    judged_holdout_ops: Count | None = None
    followed_treatment: Count = 0
    followed_holdout: Count = 0
    efficacy_checked_at: UtcMs | None = Field(
        default=None, description="when its experiment was last measured"
    )
    corrections_for: Count = Field(default=0, description="validated overseer corrections matched")
    corrections_against: Count = Field(default=0, description="invalidated overseer corrections matched")
    counted_correction_ids: Annotated[list[Witness], Field(max_length=MAX_TRACKED_AGENTS)] = Field(
        default_factory=list,
        description="the corrections already counted, as reporter_id/op_id (each counts once); "
        "a bare op id was stored before corrections kept their key",
    )
    correction_reporters: Annotated[list[Witness], Field(max_length=MAX_TRACKED_AGENTS)] = Field(
        default_factory=list,
        description="the independent reporters whose corrections counted (each reporter counts once)",
    )

    def matches(self, *, endpoint: str | None, task_class: str | None, words: list[str]) -> bool:
        """Whether the entry applies: same endpoint/task class (or none named), every word found."""
        if endpoint and self.endpoint not in (None, endpoint):
            return False
        if task_class and self.task_class not in (None, task_class):
            return False
        text = f"{self.trigger} {self.action}".lower()
        return all(word in text for word in words)

    def served(self) -> dict[str, object]:
        """What an agent gets: the advice and its provenance, not the raw evidence excerpts
        (agent-written text is data for analysts, never instructions passed to other agents),
        nor the agents' names or the consolidator's bookkeeping."""
        return {
            **self.model_dump(mode="json", include=_SERVED_FIELDS),
            "evidence_count": len(self.evidence_op_ids),
            "evidence_op_ids": self.evidence_op_ids[:MAX_SERVED_EVIDENCE_IDS],
        }


#: Evidence op ids an agent is shown per entry (``evidence_count`` counts them all).
MAX_SERVED_EVIDENCE_IDS = 5
_SERVED_FIELDS = {
    "entry_id", "trigger", "action", "kind", "confidence", "domain", "scope", "endpoint", "task_class",
    "signature_id", "source", "distilled_by", "evidence_agent_count", "evidence_reporter_count", "status",
    "created_at", "updated_at", "published_at", "instead_of", "fix_kind", "fix_names", "fix_failures",
    "fix_successes", "experiment_stage", "helpful_count",
    "harmful_count", "treatment_rate", "holdout_rate", "effect", "effect_low", "effect_high",
}  # fmt: skip


def holdout_bucket(key_name: str, entry_id: str, salt: str = HOLDOUT_SALT) -> float:
    """A reader's uniform draw in [0, 1) for one entry: a hash of (salt, entry, API key name), so the
    same key keeps its arm of an entry on every read, and its arms of two entries are independent."""
    digest = hashlib.sha256(f"{salt}\x1f{entry_id}\x1f{key_name}".encode()).hexdigest()
    return int(digest[:15], 16) / 16**15


def arm_of(key_name: str, entry: PlaybookEntry, salt: str = HOLDOUT_SALT) -> Arm:
    """The arm of a reader (an API key's name: never a claimed agent_id) for an entry. The share only
    shrinks (new 0.5 → graduated 0.05), so a key only ever moves from holdout to treatment."""
    return "holdout" if holdout_bucket(key_name, entry.entry_id, salt) < entry.holdout_share else "treatment"


class PlaybookSnapshot(BaseModel):
    """The consolidator's current view (it writes active entries only; readers filter anyway)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    generated_at: UtcMs
    entries: list[PlaybookEntry] = Field(default_factory=list)

    def select(
        self,
        *,
        endpoint: str | None = None,
        task_class: str | None = None,
        q: str | None = None,
        entry_id: str | None = None,
        limit: int = 10,
    ) -> list[PlaybookEntry]:
        """Active entries that match (``entry_id``: only that one): graduated first, then most
        confident, then newest."""
        words = (q or "").lower().split()
        found = [
            e
            for e in self.entries
            if e.status == "active"
            and (entry_id is None or e.entry_id == entry_id)
            and e.matches(endpoint=endpoint, task_class=task_class, words=words)
        ]
        found.sort(
            key=lambda e: (
                e.experiment_stage != "graduated",
                -e.confidence,
                -e.created_at.timestamp(),
                e.entry_id,
            )
        )
        return found[:limit]
