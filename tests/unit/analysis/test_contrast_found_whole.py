"""What a contrast rule found reaches the entry as found (issue 24, from the public trajectories):
a JSON type is said in words, a quote of the tool's own error template is not generalized, a cut
request is no broken JSON, the rule the tool states about an argument beats "leave it out", and a
long quote keeps the sentence that states the rule. Tools and values are made up."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from opslake.analysis.catalog.known import vocabulary_of
from opslake.analysis.catalog.shapes import spoken
from opslake.analysis.playbooks import contrast_groups, distill_groups, merge_candidates
from opslake.analysis.playbooks.contrast import Sample
from opslake.analysis.playbooks.contrast_rules import json_body_fixes
from opslake.analysis.reporters import ReporterTrust
from opslake.models.catalog import ArgumentStat, ErrorStat, ShapeStat, ToolCatalog, ToolStat
from opslake.models.ops import TRUNCATION_MARK

pytestmark = pytest.mark.unit

TRUST = ReporterTrust()
NOW = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
KEYS = ["k1", "k2"]
WORDS = ["Policy", "Garden", "Harbor", "Meadow", "Summit", "Canyon", "Willow", "Orchard"]


def argument(name: str, *shapes: str, distinct: int | None = None) -> ArgumentStat:
    return ArgumentStat(
        name=name, calls=40, witnesses=KEYS, distinct_shapes=distinct or len(shapes),
        shapes=[ShapeStat(shape=s, calls=10, witnesses=KEYS) for s in shapes],
    )  # fmt: skip


def error(endpoint: str, signature: str, message: str) -> ErrorStat:
    return ErrorStat(
        signature_id=signature, template=f"{endpoint} | tool_error | {message}", count=6, reporter_count=2
    )


VOCABULARY = vocabulary_of(
    ToolCatalog(
        tools=[
            ToolStat(endpoint="tool:save_note", calls=100, witnesses=KEYS,
                     arguments=[argument("meta", "<object>", '{"k": 9}'), argument("body", "<text>")]),
            ToolStat(endpoint="tool:run_job", calls=100, witnesses=KEYS,
                     arguments=[argument("command", "<text>")],
                     errors=[error("tool:run_job", "sig_policy", "Policy violation: command <str> is not allowed")]),
            ToolStat(endpoint="tool:search_docs", calls=100, witnesses=KEYS,
                     arguments=[argument("pattern", *WORDS, distinct=40)]),
            ToolStat(endpoint="tool:make_card", calls=100, witnesses=KEYS,
                     arguments=[argument("badge", '{"k": 9}'), argument("title", "<text>")],
                     errors=[error("tool:make_card", "sig_badge",
                                   "body failed validation: body.badge should be an object, instead was <str>.")]),
            ToolStat(endpoint="tool:open_file", calls=100, witnesses=KEYS,
                     arguments=[argument("path", "<text>")],
                     errors=[error("tool:open_file", "sig_path", "Error executing tool open_file: Invalid path "
                                   "name: <*>, must be an absolute path when not running in a sandbox")]),
        ]
    )
)  # fmt: skip


def row(side: str, endpoint: str, arguments: dict[str, Any] | str, n: int, *, error: str = "",
        signature: str = "sig_a") -> dict[str, Any]:  # fmt: skip
    return {
        "side": side, "endpoint": endpoint, "task_class": None,
        "signature_id": signature if side == "failure" else None, "op_id": f"{side}-{endpoint}-{n}",
        "agent_id": "agent", "reporter_id": KEYS[n % 2], "session_id": f"s-{side}-{n}",
        "error_type": "tool_error" if side == "failure" else None, "error": error,
        "input_summary": arguments if isinstance(arguments, str) else json.dumps(arguments),
        "earlier_ok": "",
    }  # fmt: skip


def entries(rows: list[dict[str, Any]]) -> list[Any]:
    groups = contrast_groups(rows, trust=TRUST, vocabulary=VOCABULARY)
    drafts = distill_groups(groups, vocabulary=VOCABULARY)
    result = merge_candidates([], drafts.candidates, now=NOW, vocabulary=VOCABULARY)
    assert not result.rejected and not drafts.nothing_specific, (result.rejected, drafts.nothing_specific)
    return result.entries


def test_a_json_type_is_said_in_words() -> None:
    assert [spoken(s) for s in ("<object>", "<array>", "<num>", "<url>")] == [
        "an object", "an array", "a number", "a URL",
    ]  # fmt: skip
    rows = [row("failure", "tool:save_note", {"meta": '{"k": 1}', "body": "x"}, i, error="meta is wrong")
            for i in range(4)]  # fmt: skip
    rows += [row("success", "tool:save_note", {"meta": {"k": 1}, "body": "x"}, i) for i in range(4)]
    [entry] = entries(rows)
    assert entry.action == "Send meta as an object" and entry.status == "active"


def test_a_quote_of_the_tools_own_template_keeps_its_words() -> None:
    """ "Policy" is also one of many values of another tool's argument (an instance there): inside
    the quoted template it is the tool's constant text."""
    failures = [row("failure", "tool:run_job", {"command": f"job{i}"}, i, signature="sig_policy",
                    error=f"Policy violation: command 'job{i}' is not allowed") for i in range(4)]  # fmt: skip
    [entry] = entries(failures)
    assert entry.kind == "avoid" and "'Policy violation: command <str> is not allowed'" in entry.action


def test_a_cut_request_is_no_broken_json() -> None:
    cut = '{"command": "' + "x" * 80 + TRUNCATION_MARK
    failures = [Sample.of(row("failure", "tool:run_job", cut, i)) for i in range(3)]
    successes = [Sample.of(row("success", "tool:run_job", {"command": "ls"}, i)) for i in range(4)]
    assert json_body_fixes(failures, successes) == []
    broken = [Sample.of(row("failure", "tool:run_job", '{"command": "ls}', i)) for i in range(3)]
    assert [f.kind for f in json_body_fixes(broken, successes)] == ["json_body"]


def test_the_rule_a_tool_states_about_an_argument_beats_leaving_it_out() -> None:
    """The successes never send badge, but the tool says what badge must be: not "leave badge out"."""
    error = 'body failed validation: body.badge should be an object, instead was `"{\\"k\\": 1}"`.'
    rows = [row("failure", "tool:make_card", {"badge": '{"k": 1}', "title": "t"}, i, error=error,
                signature="sig_badge") for i in range(4)]  # fmt: skip
    rows += [row("success", "tool:make_card", {"title": "t"}, i) for i in range(4)]
    [entry] = entries(rows)
    assert entry.kind == "avoid" and "body.badge should be an object" in entry.action
    assert "Leave" not in entry.action


def test_a_long_quote_keeps_the_sentence_that_states_the_rule() -> None:
    message = "Error executing tool open_file: Invalid path name: notes.txt, must be an absolute path when not running in a sandbox"  # noqa: E501
    failures = [row("failure", "tool:open_file", {"path": f"notes{i}.txt"}, i, error=message, signature="sig_path")
                for i in range(4)]  # fmt: skip
    [entry] = entries(failures)
    assert "'Invalid path name: <*>, must be an absolute path when not running in a sandbox'" in entry.action
