"""One op is one key's op_id (issue 12): the shared Arrow helper, and the analyzer's dedupe."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pyarrow.compute as pc

from opslake.jobs.analyzer import _dedupe
from opslake.lake.opkey import OP_KEY, first_of_each_key


def test_first_of_each_key_marks_a_new_key_when_any_key_column_changes() -> None:
    rows = pa.table(
        {
            "reporter_id": ["b", "a", "a", "b", "a"],
            "op_id": ["x", "x", "y", "x", "x"],
            "n": [0, 1, 2, 3, 4],
        }
    )
    order = pc.sort_indices(
        rows, sort_keys=[("reporter_id", "ascending"), ("op_id", "ascending"), ("n", "ascending")]
    )
    first = first_of_each_key(rows, OP_KEY, order)
    kept = rows.take(pc.filter(order, first)).to_pylist()
    assert [(r["reporter_id"], r["op_id"], r["n"]) for r in kept] == [
        ("a", "x", 1),
        ("a", "y", 2),
        ("b", "x", 0),
    ]
    assert first_of_each_key(rows, OP_KEY, pa.array([], pa.int64())).to_pylist() == []
    assert first_of_each_key(rows, OP_KEY, pa.array([3], pa.int64())).to_pylist() == [True]


def test_the_analyzer_keeps_one_failure_per_key_and_op_id() -> None:
    def failure(reporter: str, op_id: str, n: int) -> SimpleNamespace:
        return SimpleNamespace(reporter_id=reporter, op_id=op_id, n=n)

    kept = _dedupe([failure("mallory", "run-1", 0), failure("bob", "run-1", 1), failure("bob", "run-1", 2)])
    assert [(f.reporter_id, f.n) for f in kept] == [("mallory", 0), ("bob", 1)]
