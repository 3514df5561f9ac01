"""``opslake doctor``'s model check on a local stack configured with a model: an endpoint that does
not answer fails, and so does an open circuit breaker (every diagnosis then falls back)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from opslake.config import load_settings
from opslake.models.llm import LlmState
from opslake_local.cli import main
from opslake_local.http import LocalApi
from opslake_local.stack import QUIET_ENV, LocalStack, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def stack_with_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStack, Path]]:
    state = tmp_path_factory.mktemp("doctor-model") / "local.json"
    # a model endpoint nothing listens on (a port just freed), and no caching of the LLM state
    overrides = {
        **QUIET_ENV,
        "OPSLAKE_LLM_BASE_URL": f"http://127.0.0.1:{free_port()}/v1",
        "OPSLAKE_LLM_MODEL": "doctor-test-model",
        "OPSLAKE_SNAPSHOT_CACHE_S": "0",
    }
    with LocalStack(env_overrides=overrides) as stack:
        api = LocalApi(stack, stack.invoker())
        state.write_text(json.dumps({"api_url": api.start(), **stack.describe(), "pid": os.getpid()}))
        try:
            yield stack, state
        finally:
            api.stop()


def _model_check(state: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["--state", str(state), "doctor", "--only", "model", "--json"])
    (check,) = json.loads(capsys.readouterr().out)
    return code, check


def test_an_unreachable_model_fails(
    stack_with_model: tuple[LocalStack, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, check = _model_check(stack_with_model[1], capsys)
    assert code == 1 and check["status"] == "FAIL"
    assert "the endpoint of doctor-test-model does not answer" in check["detail"]
    assert "LlmBaseUrl" in check["fix"]


def test_an_open_breaker_fails(
    stack_with_model: tuple[LocalStack, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    stack, state = stack_with_model
    key = load_settings(stack.environment).llm_state_key
    now = datetime.now(UTC)
    opened = LlmState(
        circuit_breaker="open",
        recent_error_rate=1.0,
        updated_at=now,
        model="doctor-test-model",
        opened_at=now,
    )
    s3 = stack.client("s3")
    s3.put_object(Bucket=stack.bucket, Key=key, Body=opened.model_dump_json().encode())
    try:
        code, check = _model_check(state, capsys)
    finally:
        s3.delete_object(Bucket=stack.bucket, Key=key)
    assert code == 1 and check["status"] == "FAIL"
    assert "the circuit breaker of doctor-test-model is open (recent error rate 100%)" in check["detail"]
    assert "cooldown" in check["fix"]
