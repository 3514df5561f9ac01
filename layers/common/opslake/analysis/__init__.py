"""Failure analysis, pure logic: signatures, heuristic diagnoses, diagnosis prompts, the lesson fence
(what text may be served), who vouches for evidence (reporters and their trust levels), intervals for
rates and their differences (no I/O).

Names resolve lazily: a function that needs one module (``POST /ask`` the prompts' data fence,
the lesson fence's vocabulary) does not import the others (corrections, playbooks: ~100 ms).
"""

from opslake._lazy import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "corrections": ("CorrectionResult", "OutcomeRow", "count_corrections"),
        "fence": ("KnownNames", "default_known", "instruction_refusal", "lesson_refusal"),
        "heuristics": ("classify", "diagnose_heuristically"),
        "intervals": ("design_effect", "mh_risk_difference", "newcombe", "wilson"),
        "masking": (
            "input_template_sql",
            "normalize_endpoint_sql",
            "normalize_sql",
            "signature_id_sql",
            "template_sql",
            "variant_sql",
        ),
        "playbooks": (
            "CandidateGroup",
            "DistilledCandidate",
            "LogRow",
            "MergeResult",
            "Rejection",
            "SuccessRow",
            "approve",
            "candidate_groups",
            "distill",
            "heuristic_draft",
            "merge_candidates",
            "snapshot",
        ),
        "prompts": ("DATA_CLOSE", "DATA_OPEN", "SYSTEM_PROMPT", "diagnosis_data", "diagnosis_messages"),
        "reporters": ("INTERNAL_REPORTERS", "RUNTIME_MAX_REPORTERS", "ReporterTrust", "cap_witnesses"),
        "sanitize": ("is_poisoned", "sanitize_entry_text"),
        "signatures": (
            "MAX_VARIANTS",
            "SignatureIndex",
            "apply_failures",
            "input_template",
            "mark_diagnosed",
            "needs_diagnosis",
            "normalize",
            "normalize_endpoint",
            "select_for_diagnosis",
            "signature_id",
            "template_of",
            "variant_of",
        ),
    },
)
