"""What makes an op row one op: its ``op_id`` as sent by one API key.

``op_id`` is the client's idempotency key, so it is only unique per client. ``reporter_id`` is the
API key's name, stamped by the server; every place that keeps one row per op (the writer within a
batch, compaction within an hour, the analyzer within its window) keys on both, so one key can
never replace or shadow another key's op by sending its ``op_id``, while a key that resends its
own op (a retry, an SQS redelivery) still makes one row.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

#: The columns that identify an op in the ``ops`` table.
OP_KEY: tuple[str, str] = ("reporter_id", "op_id")


def first_of_each_key(rows: pa.Table, key_columns: Sequence[str], order: pa.Array) -> pa.Array:
    """For ``rows`` taken in ``order`` (an order sorted by ``key_columns`` first), a boolean array,
    true where a row's key differs from the previous row's: the first row of each key."""
    if len(order) < 2:
        return pa.array([True] * len(order), pa.bool_())
    changed: pa.Array | None = None
    for name in key_columns:
        column = pc.take(rows.column(name).combine_chunks(), order)
        differs = pc.not_equal(column.slice(1), column.slice(0, len(column) - 1))
        changed = differs if changed is None else pc.or_(changed, differs)
    return pa.concat_arrays([pa.array([True]), changed])
