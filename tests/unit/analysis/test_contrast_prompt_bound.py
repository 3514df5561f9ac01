"""A prompt-bound fix names a round bound (issue 16 review): the largest successful prompt varies
from run to run (11,873 tokens, then 11,920), and the bound is part of the fix's names, hence of
its group key and entry id; an exact bound made a new entry, with a new experiment, at every run."""

from __future__ import annotations

from typing import Any

import pytest

from opslake.analysis.playbooks import contrast_groups
from opslake.analysis.reporters import ReporterTrust

pytestmark = pytest.mark.unit


def model_call(side: str, n: int, tokens: int) -> dict[str, Any]:
    return {
        "side": side, "endpoint": "runtime:model_call", "task_class": "q",
        "signature_id": "sig_1" if side == "failure" else None, "op_id": f"{side}{n}", "agent_id": f"a{n}",
        "reporter_id": f"k{n}", "session_id": f"s{n}", "error_type": None,
        "error": "timed out" if side == "failure" else None, "input_summary": None, "linked_input": None,
        "earlier_ok": "", "input_tokens": str(tokens),
    }  # fmt: skip


def bound_group(largest_success: int) -> Any:
    rows = [model_call("failure", n, 30_000 + n) for n in (1, 2)]
    rows += [model_call("success", 3, 9_000), model_call("success", 4, largest_success)]
    (group,) = contrast_groups(rows, trust=ReporterTrust())
    return group


def test_the_same_mistake_in_two_runs_is_one_fix_with_a_round_bound() -> None:
    first, second = bound_group(11_873), bound_group(11_920)
    assert first.group_key == second.group_key and first.fix_names == ("11000",)
    assert first.fix_action == "Keep model prompts under 11000 input tokens"
    assert bound_group(12_000).fix_names == ("12000",) and bound_group(9_000).fix_names == ("9000",)
