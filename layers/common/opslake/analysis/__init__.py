"""Failure analysis, pure logic: signatures, heuristic diagnoses, diagnosis prompts, the lesson fence
(what text may be served), who vouches for evidence (reporters and their trust levels) (no I/O)."""

from opslake.analysis.efficacy import EfficacyResult, OutcomeRow, measure_efficacy
from opslake.analysis.fence import KnownNames, default_known, instruction_refusal, lesson_refusal
from opslake.analysis.heuristics import classify, diagnose_heuristically
from opslake.analysis.playbooks import (
    CandidateGroup,
    DistilledCandidate,
    LogRow,
    MergeResult,
    Rejection,
    SuccessRow,
    approve,
    candidate_groups,
    distill,
    heuristic_draft,
    merge_candidates,
    snapshot,
)
from opslake.analysis.prompts import DATA_CLOSE, DATA_OPEN, SYSTEM_PROMPT, diagnosis_data, diagnosis_messages
from opslake.analysis.reporters import INTERNAL_REPORTERS, RUNTIME_MAX_REPORTERS, ReporterTrust, cap_witnesses
from opslake.analysis.sanitize import is_poisoned, sanitize_entry_text
from opslake.analysis.signatures import (
    MAX_VARIANTS,
    SignatureIndex,
    apply_failures,
    input_template,
    mark_diagnosed,
    needs_diagnosis,
    normalize,
    normalize_endpoint,
    select_for_diagnosis,
    signature_id,
    template_of,
    variant_of,
)

__all__ = [
    "DATA_CLOSE",
    "DATA_OPEN",
    "INTERNAL_REPORTERS",
    "MAX_VARIANTS",
    "RUNTIME_MAX_REPORTERS",
    "SYSTEM_PROMPT",
    "CandidateGroup",
    "DistilledCandidate",
    "EfficacyResult",
    "KnownNames",
    "LogRow",
    "MergeResult",
    "OutcomeRow",
    "Rejection",
    "ReporterTrust",
    "SignatureIndex",
    "SuccessRow",
    "apply_failures",
    "approve",
    "candidate_groups",
    "cap_witnesses",
    "classify",
    "default_known",
    "diagnose_heuristically",
    "diagnosis_data",
    "diagnosis_messages",
    "distill",
    "heuristic_draft",
    "input_template",
    "instruction_refusal",
    "is_poisoned",
    "lesson_refusal",
    "mark_diagnosed",
    "measure_efficacy",
    "merge_candidates",
    "needs_diagnosis",
    "normalize",
    "normalize_endpoint",
    "sanitize_entry_text",
    "select_for_diagnosis",
    "signature_id",
    "snapshot",
    "template_of",
    "variant_of",
]
