"""``opslake doctor``'s model check on a local stack configured with a model: a reachable one is ok,
an endpoint that does not answer fails, and so does an open circuit breaker (every diagnosis then
falls back to the heuristics)."""

from __future__ import annotations

import contextlib
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
from tests.fake_llm import FakeLlm

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module", params=["reachable", "unreachable"])
def stack_with_model(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalStack, Path, str]]:
    """A local stack whose functions use a model: a fake OpenAI-compatible server, or an endpoint
    nothing listens on (a port just freed). The LLM state is read anew at each GET /model."""
    state = tmp_path_factory.mktemp("doctor-model") / "local.json"
    with contextlib.ExitStack() as resources:
        if request.param == "reachable":
            base_url = resources.enter_context(FakeLlm(model="doctor-test-model")).base_url
        else:
            base_url = f"http://127.0.0.1:{free_port()}/v1"
        overrides = {
            **QUIET_ENV,
            "OPSLAKE_LLM_BASE_URL": base_url,
            "OPSLAKE_LLM_MODEL": "doctor-test-model",
            "OPSLAKE_SNAPSHOT_CACHE_S": "0",
        }
        stack = resources.enter_context(LocalStack(env_overrides=overrides))
        api = LocalApi(stack, stack.invoker())
        state.write_text(json.dumps({"api_url": api.start(), **stack.describe(), "pid": os.getpid()}))
        resources.callback(api.stop)
        yield stack, state, request.param


def _model_check(state: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["--state", str(state), "doctor", "--only", "model", "--json"])
    (check,) = json.loads(capsys.readouterr().out)
    return code, check


def test_a_reachable_model_is_ok_and_an_unreachable_one_fails(
    stack_with_model: tuple[LocalStack, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, state, kind = stack_with_model
    code, check = _model_check(state, capsys)
    if kind == "reachable":
        assert code == 0 and check == {
            "status": "ok",
            "name": "model",
            "detail": "doctor-test-model reachable, circuit breaker never used",
            "fix": None,
        }
    else:
        assert code == 1 and check["status"] == "FAIL"
        assert "the endpoint of doctor-test-model does not answer" in check["detail"]
        assert "LlmBaseUrl" in check["fix"]


def test_an_open_breaker_fails(
    stack_with_model: tuple[LocalStack, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Reachable or not, an open breaker means every diagnosis falls back: a failure."""
    stack, state, _ = stack_with_model
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
