"""The observation middleware keeps the record of a call whose request text is not well-formed
Unicode (found by tests/integration/test_fuzz_routes.py: the call was answered, but left no op)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from opslake.ingest.observe import SESSION_HEADER, build_record

pytestmark = pytest.mark.unit


def test_lone_surrogates_in_the_request_do_not_cost_the_record() -> None:
    record = build_record(
        endpoint="/tables",
        reporter_id="agent-7",
        started_at=datetime(2026, 11, 22, tzinfo=UTC),
        duration_ms=1.0,
        status=415,
        request_text="GET /tables?q=\udcff \ud800{}",
        headers={SESSION_HEADER: "s-\udfff"},
        output_summary=None,
        attributes={"role": "\ud800"},
        error_code="unsupported_media_type",
        error_message="Content-Type '\ud800' is not accepted",
    )
    assert record.input_summary is not None and record.input_summary.startswith("GET /tables?q=\ufffd")
    assert record.error == "Content-Type '\ufffd\ufffd\ufffd' is not accepted"
    assert record.session_id == "s-\ufffd\ufffd\ufffd"
    assert not any("\ud800" <= c <= "\udfff" for c in record.model_dump_json())
