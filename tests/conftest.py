"""Shared test plumbing: markers by folder (slow files first), a scrubbed AWS env, one botocore
loader per process, handler loading, AWS event builders.

Events are built from the project's own samples in events/ (made with `sam local generate-event`
shapes); where ../shared/fixtures/aws-events/ exists (as in CI), tests also run against those
published Powertools fixtures.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

ROOT = Path(__file__).resolve().parents[1]
EVENTS = ROOT / "events"
SHARED_FIXTURES = ROOT.parent / "shared" / "fixtures" / "aws-events"

hypothesis_settings.register_profile("default", max_examples=200, deadline=None, derandomize=True)
hypothesis_settings.load_profile("default")

# Never let a test reach a real AWS account, whatever the developer's shell has configured, and
# never let that shell configure the code under test: every AWS_*, OPSLAKE_* and POWERTOOLS_*
# variable goes (profiles, endpoints, retry modes, a stack's settings), ~/.aws is not read, and
# the tests set what they need. Each xdist worker is its own process and does the same.
for _name in [n for n in os.environ if n.startswith(("AWS_", "OPSLAKE_", "POWERTOOLS_"))]:
    del os.environ[_name]
os.environ.update(
    AWS_CONFIG_FILE=os.devnull,
    AWS_SHARED_CREDENTIALS_FILE=os.devnull,
    AWS_ACCESS_KEY_ID="testing",
    AWS_SECRET_ACCESS_KEY="testing",
    AWS_DEFAULT_REGION="us-east-1",
    POWERTOOLS_TRACE_DISABLED="true",
    POWERTOOLS_SERVICE_NAME="opslake",
    POWERTOOLS_METRICS_NAMESPACE="opslake",
    POWERTOOLS_LOG_LEVEL="WARNING",
)


class _UniquePaths(list[str]):
    """A loader's search paths where appending a path already listed is a no-op (boto3 appends
    its own data path for every Session it makes)."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)


def _share_botocore_loader() -> None:
    """One botocore data loader per search path for the whole test process.

    moto's ``mock_aws`` resets boto3's default session, and handlers are cold-started per test, so
    each test made fresh sessions whose loaders parsed the same service-model JSON again (most of
    the cost of the ``aws`` fixture). A loader is already shared by every client of one session,
    and its results are read-only; sharing it across sessions changes only how often JSON is parsed.
    """
    import botocore.session

    make = botocore.session.create_loader
    loaders: dict[str | None, Any] = {}

    def create_loader(search_path_string: str | None = None) -> Any:
        if search_path_string not in loaders:
            loader = make(search_path_string)
            loader._search_paths = _UniquePaths(loader.search_paths)
            loaders[search_path_string] = loader
        return loaders[search_path_string]

    botocore.session.create_loader = create_loader  # type: ignore[assignment]


_share_botocore_loader()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its level from its folder (tests/unit → unit, ...), then move the modules
    holding ``slow`` tests to the front, each kept whole and in order: ``pytest -n`` with
    ``--dist loadfile --no-loadscope-reorder`` (the Makefile's) hands out files in this order, so
    the long ones start first instead of leaving one worker busy at the end while the other idles."""
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        if parts and parts[0] in ("unit", "integration", "infrastructure"):
            item.add_marker(getattr(pytest.mark, parts[0]))
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: the rest keep their order


class FakeLambdaContext:
    function_name = "opslake-test"
    function_version = "$LATEST"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:opslake-test"
    aws_request_id = "00000000-0000-0000-0000-000000000000"
    log_group_name = "/aws/lambda/opslake-test"
    log_stream_name = "test"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 30_000


@pytest.fixture
def lambda_context() -> FakeLambdaContext:
    return FakeLambdaContext()


@pytest.fixture
def load_handler(monkeypatch: pytest.MonkeyPatch) -> Callable[..., ModuleType]:
    """Import a handler module fresh (cold start) with the given OPSLAKE_* environment."""
    from opslake import runtime
    from opslake.config import get_settings

    def load(relative_path: str, **env: str) -> ModuleType:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        get_settings.cache_clear()
        runtime.reset()
        path = ROOT / relative_path
        name = f"handler_{path.parent.name}_{path.stem}_{uuid.uuid4().hex[:8]}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    yield load
    get_settings.cache_clear()
    runtime.reset()


def load_event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())


def shared_fixture(name: str) -> dict[str, Any] | None:
    path = SHARED_FIXTURES / name
    return json.loads(path.read_text()) if path.exists() else None


def api_event(
    method: str,
    path: str,
    body: str | None,
    *,
    key_id: str | None = "test-key-id",
    base: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An API Gateway REST (v1) proxy event for ``method path`` with ``body``."""
    event = copy.deepcopy(base if base is not None else load_event("events_post_single.json"))
    event.update(httpMethod=method, path=path, resource=path, body=body, isBase64Encoded=False)
    context = event.setdefault("requestContext", {})
    context.update(httpMethod=method, resourcePath=path, path=path)
    identity = context.setdefault("identity", {})
    identity["apiKeyId"] = key_id
    identity["apiKey"] = "secret-key-value" if key_id else None
    return event


def sqs_record(
    body: str, *, message_id: str | None = None, sent_ms: int, receive_count: int = 1
) -> dict[str, Any]:
    """One SQS record in the shape the event source mapping delivers (from events/writer_sqs.json)."""
    record = copy.deepcopy(load_event("writer_sqs.json")["Records"][0])
    record.update(
        body=body, messageId=message_id or str(uuid.uuid4()), receiptHandle=f"rh-{uuid.uuid4().hex}"
    )
    record["attributes"].update(SentTimestamp=str(sent_ms), ApproximateReceiveCount=str(receive_count))
    return record


@pytest.fixture
def fail_aws_calls() -> Iterator[Callable[..., dict[str, int]]]:
    """Make the next N calls of a botocore operation fail with an AWS error (for clients created later).

    ``fail("s3", "PutObject", times=2, code="SlowDown")`` returns a counter of injected failures.
    """
    import boto3
    from botocore.exceptions import ClientError

    from opslake import runtime

    # Handlers' clients come from runtime's botocore session, other clients from boto3's default one.
    boto3.setup_default_session()
    registered: list[tuple[Any, str, Callable[..., None]]] = []

    def fail(
        service: str, operation: str, *, times: int = 1, code: str = "ServiceUnavailable"
    ) -> dict[str, int]:
        counter = {"injected": 0}

        def hook(**_: Any) -> None:
            if counter["injected"] < times:
                counter["injected"] += 1
                raise ClientError({"Error": {"Code": code, "Message": "injected by the test"}}, operation)

        event_name = f"before-call.{service}.{operation}"
        assert boto3.DEFAULT_SESSION is not None
        for events in (boto3.DEFAULT_SESSION.events, runtime.session().get_component("event_emitter")):
            events.register(event_name, hook)
            registered.append((events, event_name, hook))
        return counter

    yield fail
    for events, event_name, hook in registered:
        events.unregister(event_name, hook)
    boto3.DEFAULT_SESSION = None
