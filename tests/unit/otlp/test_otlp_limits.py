"""/v1/traces limits: the text budget and the op attribute limit, each a defect once (each failed before its fix)."""

from __future__ import annotations

import pytest

from opslake.models.ops import MAX_ERROR_CHARS, PRE_REDACTION_MARGIN
from opslake.otlp.ingest import MAX_EXPORT_TEXT_CHARS

from .test_otlp import ingest, request_of, tool

pytestmark = pytest.mark.unit


def test_long_status_messages_spend_the_text_budget_only_as_far_as_redaction_reads_them() -> None:
    spans = [tool(f"t{i}", span_id=i + 1, error="E" * 100_000) for i in range(60)]
    assert 60 * (MAX_ERROR_CHARS + PRE_REDACTION_MARGIN) < MAX_EXPORT_TEXT_CHARS // 2  # far within it
    result = ingest(request_of(*spans))
    assert (len(result.stored), result.rejected) == (60, [])


def test_the_mappings_own_attributes_do_not_silently_eat_a_runtimes_attributes() -> None:
    from .test_otlp import map_export

    def claims(count: int) -> dict[str, str]:
        return {f"opslake__attributes__k{i:02d}": "v" for i in range(count)}

    # the span's own: otlp.op, otel.span_id, otel.span_name (no parent, no scope name): 47 left
    (fits,) = [m.op for m in map_export(request_of(tool("lookup", **claims(47)))).ops]
    assert len(fits["attributes"]) == 50 and fits["attributes"]["k46"] == "v"
    assert fits["attributes"]["otel.span_id"] == "0000000000000001"
    # one more is refused with the room there was, not "got 51" for a span that sent 48
    result = ingest(request_of(tool("lookup", **claims(48))))
    (reason,) = result.rejected
    assert "48 opslake.attributes.* given; at most 47 fit beside the span's own 3" in reason
    # convention attributes are kept as room allows, after the runtime's own
    crowded = tool("lookup", gen_ai__tool__call__id="c1", gen_ai__tool__type="function", **claims(46))
    (op,) = [m.op for m in map_export(request_of(crowded)).ops]
    assert len(op["attributes"]) == 50
    assert "gen_ai.operation.name" in op["attributes"] and "gen_ai.tool.type" not in op["attributes"]
    # a claim cannot replace the span's own ids
    (spoof,) = [
        m.op for m in map_export(request_of(tool("x", opslake__attributes__otel__span_id="f" * 16))).ops
    ]
    assert spoof["attributes"]["otel.span_id"] == "0000000000000001"
