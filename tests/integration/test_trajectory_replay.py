"""Real trajectories nobody here wrote (an MIT-licensed extract of SWE-agent's published runs,
tests/data/trajectories/swe-agent) replayed through the local stack the way bench/bench_trajectories.py
replays every public set: the converter reads the raw files, the OpenTelemetry SDK's OTLP/HTTP
exporter sends each tool call as an ``execute_tool`` span from one of four API keys, the writer
drains, the analyzer and consolidator run, and the lake is scored against the set's causes table
(bench/trajectories/swe-agent/causes.json).

What holds today and must keep holding: every tool call lands as exactly one op, every failed call
gets a signature, no signature mixes two real causes, and no published entry is generic.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRACT = ROOT / "tests" / "data" / "trajectories" / "swe-agent"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def bench() -> Iterator[None]:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        yield
    finally:
        sys.path.remove(str(ROOT / "bench"))


def test_the_extract_converts_to_each_step_with_the_causes_the_table_names(bench: None) -> None:
    from trajectories.causes import load_causes
    from trajectories.convert import convert

    calls = convert("swe-agent", EXTRACT)
    table = load_causes("swe-agent")

    assert len(calls) == 53
    assert len({call.session for call in calls}) == 4
    assert Counter(table.assign(call) for call in calls if call.errored) == {
        "S01": 3,  # edit refused: unexpected indent
        "S02": 3,  # edit refused: unmatched bracket
        "S03": 1,  # edit refused: undefined name
        "S04": 1,  # a path that does not exist
        "S05": 3,  # the agent's own script raised
    }
    edit = next(call for call in calls if call.tool == "edit" and call.errored)
    assert edit.arguments.startswith('{"args": ') and '"text": ' in edit.arguments
    assert edit.error is not None and edit.error.startswith(
        "Your proposed edit has introduced new syntax error(s): E999"
    )


def test_every_tool_call_lands_once_and_no_signature_mixes_two_causes(bench: None) -> None:
    from bench_trajectories import run_set
    from trajectories.causes import load_causes
    from trajectories.convert import convert

    calls = convert("swe-agent", EXTRACT)
    result = run_set("swe-agent", calls, load_causes("swe-agent"), rounds=1)

    assert result.ops_landed == result.ops_landed_once == len(calls) == 53
    assert result.failures_with_signature == result.failed_calls == 11
    assert result.signatures, "the failures got no signature"
    assert {row["purity"] for row in result.signatures} == {1.0}
    assert result.weighted_purity == 1.0
    assert sum(row["ops"] for row in result.signatures) == 11
    # every real cause has its own signature(s): a signature's ops share one cause
    assert set(result.signatures_per_cause) == {"S01", "S02", "S03", "S04", "S05"}
    assert result.consolidator and not result.consolidator[0]["errors"]
    # what the consolidator publishes from real traffic names something of its tool (issue 24)
    assert result.generic_entries == 0 and all(not e["generic"] for e in result.entries)
