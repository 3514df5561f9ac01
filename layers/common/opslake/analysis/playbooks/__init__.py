"""The consolidator's pure logic: candidate groups → drafts → playbook entries → snapshot.

Specific entries come from contrasts (:mod:`.contrast_sql` samples each repeated failure beside
the successes of its endpoint and task class; :func:`contrast_groups` states the difference as
when / do / instead of, with validated names only). Every draft is generalized (:mod:`.generalize`)
and passes the quality gate (:func:`quality_refusal`: no action that restates its endpoint, names
nothing a reader can act on, or is tied to one instance) at the merge and at every review.

No I/O here. The consolidator has the engine tally the window's evidence into groups
(:mod:`.evidence_sql` writes the SQL: successes and ``/log`` entries, rows bounded by groups, not
by ops), reads the analyzer's "avoid" diagnoses, calls :func:`groups_from_tallies`
(:mod:`.grouping`; :func:`candidate_groups` is the same over rows in memory), :func:`distill`
for each group (:mod:`.drafting`: the LLM when configured, else or on any invalid/poisoned answer
the heuristic), :func:`merge_candidates` against the current entries (:mod:`.merging`), runs the
holdout experiments (:mod:`.experiment`: treatment against holdout by API key), records every edit
as a delta (:mod:`.deltas`), and writes :func:`snapshot` (:mod:`.lifecycle`: active entries
only) as the object ``GET /playbooks`` serves.

Poisoning defences, in order: ops from untrusted API keys are no evidence; a group needs
``min_successes`` ops from ``min_agents`` distinct claimed agents; a model answer is validated
(:class:`~opslake.models.playbooks.EntryDraft`) and refused when poisoned; every served text is
validated parts plus free text that passed the lesson fence as it arrived
(:mod:`opslake.analysis.fence`: checked, never cleaned into shape), and so are the claimed
endpoint and task class it serves; a group whose own evidence reads as written to its reader is
refused whatever the distiller made of it; an entry is
published only when ``min_reporters`` independent reporters (API keys by trust level, never claimed
agents: :mod:`opslake.analysis.reporters`) vouch for it, else it waits as ``proposed`` until
:func:`approve` (:func:`review`); with ``approval_mode`` every new entry waits so. An operator's
approval is never undone by the fence: an approved entry it refuses (say, approved before this
fence) stays served and is reported at every run; approving a refused entry takes
``override_fence``, recorded on the entry (``fence_override_reason``).
"""

from opslake.analysis.playbooks.contrast import CallShape, Fix, contrast_groups, parse_call
from opslake.analysis.playbooks.contrast_sql import contrast_samples_sql, signature_of_failure
from opslake.analysis.playbooks.deltas import Delta, delta_id, diff, merge_author
from opslake.analysis.playbooks.drafting import (
    HEURISTIC,
    AskLlm,
    DistilledCandidate,
    Drafts,
    distill,
    distill_groups,
    domain_of,
    generalized,
    heuristic_draft,
    names_fix,
    playbook_prompt,
)
from opslake.analysis.playbooks.evidence_sql import (
    log_tallies_sql,
    success_tallies_sql,
    success_template_sql,
    tallies_from_rows,
)
from opslake.analysis.playbooks.experiment import (
    ArmRow,
    ExperimentResult,
    Rules,
    apply_experiment,
    experiment_queries,
    experiment_sql,
    judge,
    start_experiments,
)
from opslake.analysis.playbooks.generalize import GENERALIZED_FORMS, Replaced, generalize, instance_values
from opslake.analysis.playbooks.grouping import (
    IGNORED_ENDPOINTS,
    CandidateGroup,
    GroupTally,
    LogRow,
    SuccessRow,
    candidate_groups,
    groups_from_tallies,
    lesson_key,
    success_template,
    tally_logs,
    tally_successes,
)
from opslake.analysis.playbooks.lifecycle import EntryNotFoundError, Review, approve, retire, review, snapshot
from opslake.analysis.playbooks.merging import (
    EntryMerge,
    MergeResult,
    Rejection,
    entry_id_for,
    ever_served,
    find_duplicate,
    merge_candidates,
    merge_entries,
    rejection_reason,
    similarity,
)
from opslake.analysis.playbooks.quality import QUALITY, quality_label, quality_refusal

__all__ = [
    "GENERALIZED_FORMS",
    "HEURISTIC",
    "IGNORED_ENDPOINTS",
    "QUALITY",
    "ArmRow",
    "AskLlm",
    "CallShape",
    "CandidateGroup",
    "Delta",
    "DistilledCandidate",
    "Drafts",
    "EntryMerge",
    "EntryNotFoundError",
    "ExperimentResult",
    "Fix",
    "GroupTally",
    "LogRow",
    "MergeResult",
    "Rejection",
    "Replaced",
    "Review",
    "Rules",
    "SuccessRow",
    "apply_experiment",
    "approve",
    "candidate_groups",
    "contrast_groups",
    "contrast_samples_sql",
    "delta_id",
    "diff",
    "distill",
    "distill_groups",
    "domain_of",
    "entry_id_for",
    "ever_served",
    "experiment_queries",
    "experiment_sql",
    "find_duplicate",
    "generalize",
    "generalized",
    "groups_from_tallies",
    "heuristic_draft",
    "instance_values",
    "judge",
    "lesson_key",
    "log_tallies_sql",
    "merge_author",
    "merge_candidates",
    "merge_entries",
    "names_fix",
    "parse_call",
    "playbook_prompt",
    "quality_label",
    "quality_refusal",
    "rejection_reason",
    "retire",
    "review",
    "signature_of_failure",
    "similarity",
    "snapshot",
    "start_experiments",
    "success_tallies_sql",
    "success_template",
    "success_template_sql",
    "tallies_from_rows",
    "tally_logs",
    "tally_successes",
]
