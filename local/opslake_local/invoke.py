"""Run Lambda handlers in this process, the way Lambda would.

Each function's handler file is loaded by path under a module name of its own (so two functions
with a ``handler.py`` never collide), with its layers' content directories and its code
directory importable, and with its own environment variables applied while it loads (its cold
start). Events and results pass through JSON, as they do in Lambda, so a handler that returns
something Lambda could not serialize fails here too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from opslake._lazy import import_file
from opslake_local.schedule import schedules
from opslake_local.template import FunctionSpec, Template

Handler = Callable[[dict[str, Any], Any], Any]
_IMPORT_LOCK = threading.Lock()


@dataclass
class LambdaContext:
    """The attributes of Lambda's context object that handlers and Powertools use."""

    function_name: str
    memory_limit_in_mb: int
    invoked_function_arn: str
    timeout_s: int
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = "local"
    _deadline: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        self.log_group_name = self.log_group_name or f"/aws/lambda/{self.function_name}"
        self._deadline = time.monotonic() + self.timeout_s

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the function's configured timeout."""
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class FunctionError(Exception):
    """The handler raised (Lambda reports ``Unhandled``); the cause is chained."""

    def __init__(self, function: str, cause: BaseException) -> None:
        super().__init__(f"{function} failed: {type(cause).__name__}: {cause}")
        self.function = function


@contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """Temporarily overlay environment variables (for a handler's cold start only)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _prepend_sys_path(paths: list[Path]) -> None:
    """Make layer and code directories importable (like /opt/python and /var/task)."""
    for path in reversed(paths):
        text = str(path)
        if text not in sys.path:
            sys.path.insert(0, text)


def reset_shared_caches() -> None:
    """Forget settings cached by an earlier stack in this process: a new stack is a cold start."""
    config = sys.modules.get("opslake.config")
    get_settings = getattr(config, "get_settings", None)
    if get_settings is not None and hasattr(get_settings, "cache_clear"):
        get_settings.cache_clear()
    runtime = sys.modules.get("opslake.runtime")
    if runtime is not None:
        runtime.reset()  # clients built for an earlier stack point at its (stopped) moto server


def import_cold(module: str, env_overrides: Mapping[str, str]) -> ModuleType:
    """Import ``module`` with ``env_overrides`` in the environment while it loads (under the lock
    handlers load with), so that what it creates at import, such as the service's Powertools
    logger, sees them, as in a cold start. An imported module is returned as it is."""
    if module in sys.modules:
        return sys.modules[module]
    with _IMPORT_LOCK, _environment(env_overrides):
        return importlib.import_module(module)


def load_handler(
    spec: FunctionSpec, module_name: str, env_overrides: Mapping[str, str] | None = None
) -> Handler:
    """Import a function's handler file by path and return its handler callable; the function's
    environment (plus local overrides, e.g. a quieter log level) is in place while it loads."""
    path = spec.handler_file
    if not path.is_file():
        raise FileNotFoundError(f"{spec.logical_id}: handler file {path} does not exist")
    with _IMPORT_LOCK, _environment({**spec.environment, **(env_overrides or {})}):
        _prepend_sys_path([*spec.layer_dirs, spec.code_dir])
        module = import_file(module_name, path)
    handler = getattr(module, spec.attribute, None)
    if not callable(handler):
        raise AttributeError(f"{spec.logical_id}: {path} has no callable {spec.attribute!r}")
    return handler


class Invokes(Protocol):
    """What the local API needs of an invoker: this process's :class:`Invoker`, or a pool of
    container processes (:class:`opslake_local.containers.ContainerPool`)."""

    def invoke(self, logical_id: str, event: Mapping[str, Any]) -> Any: ...


class Invoker:
    """Loads handlers lazily (first invocation = cold start) and invokes them, one invocation at a
    time per function: a Lambda container serves one request at a time, and handlers rely on it, so
    callers on many threads (the threading HTTP server, the drainer) wait for the function rather
    than share its state. The functions behind API routes also wait for each other: Powertools'
    resolvers keep the event being resolved on a class they all share (``BaseRouter.current_event``),
    which in Lambda is one process per function but here is one process for all of them, so two
    routes resolved at once could record each other's request."""

    def __init__(self, template: Template, *, env_overrides: Mapping[str, str] | None = None) -> None:
        self.template = template
        self.env_overrides = dict(env_overrides or {})
        self.functions = template.functions()
        self._handlers: dict[str, Handler] = {}
        api_lock = threading.Lock()  # one for every function behind an API route (see the class doc)
        behind_api = {route.function for route in template.api_routes()}
        self._locks = {
            logical_id: api_lock if logical_id in behind_api else threading.Lock()
            for logical_id in self.functions
        }
        self._token = uuid.uuid4().hex[:8]  # a new Invoker gets fresh modules: a new cold start
        reset_shared_caches()

    def handler(self, logical_id: str) -> Handler:
        """The handler of a template function, imported on first use."""
        if logical_id not in self.functions:
            known = ", ".join(sorted(self.functions))
            raise KeyError(f"no function {logical_id!r} in the template (known: {known})")
        if logical_id not in self._handlers:
            spec = self.functions[logical_id]
            module_name = f"opslake_fn_{logical_id}_{self._token}"
            self._handlers[logical_id] = load_handler(spec, module_name, self.env_overrides)
        return self._handlers[logical_id]

    def context(self, logical_id: str) -> LambdaContext:
        """A fresh context for one invocation of ``logical_id``."""
        spec = self.functions[logical_id]
        name = str(self.template.ref(logical_id))
        return LambdaContext(
            function_name=name,
            memory_limit_in_mb=spec.memory_mb,
            invoked_function_arn=str(self.template.resolver.get_att(logical_id, "Arn")),
            timeout_s=spec.timeout_s,
        )

    def invoke(self, logical_id: str, event: Mapping[str, Any]) -> Any:
        """Invoke a function with a JSON-serializable event; returns its JSON-round-tripped result.
        Waits while another invocation of the same function runs (its cold start included)."""
        payload = json.loads(json.dumps(event))
        with self._lock(logical_id):
            handler = self.handler(logical_id)
            try:
                result = handler(payload, self.context(logical_id))
            except Exception as exc:
                raise FunctionError(logical_id, exc) from exc
            finally:
                _discard_unpublished_metrics()
        return json.loads(json.dumps(result))

    def _lock(self, logical_id: str) -> threading.Lock:
        """The lock of ``logical_id``'s single container; an unknown function raises as
        :meth:`handler` does."""
        if logical_id not in self._locks:
            self.handler(logical_id)  # raises KeyError naming the known functions
        return self._locks[logical_id]


def _discard_unpublished_metrics() -> None:
    """With metrics disabled (the local stack's quiet mode) Powertools keeps every metric it is
    given, and prints the set once one metric holds 100 values. Each invocation here is a whole
    Lambda invocation: what it did not publish is dropped, as a new invocation would start clean."""
    observability = sys.modules.get("opslake.observability")
    if observability is None:
        return
    from aws_lambda_powertools.metrics.functions import is_metrics_disabled

    if is_metrics_disabled():
        observability.metrics.clear_metrics()


def default_event(template: Template, logical_id: str, at: datetime | None = None) -> dict[str, Any]:
    """The event a function gets when none is given, after ``sam local invoke``'s habit: a
    scheduled function gets what its (first) schedule sends at ``at`` (default: now), an
    EventBridge "Scheduled Event" with the rule's ARN and the time filled in; any other function
    (an API route, a queue consumer) gets ``{}``."""
    for schedule in schedules(template):
        if schedule.function == logical_id:
            when = at or datetime.now(UTC)
            return schedule.event(when, region=template.region, account_id=template.account_id)
    return {}


def invoke(template: Template, function_logical_id: str, event: Mapping[str, Any]) -> Any:
    """One-shot convenience: load and invoke ``function_logical_id`` with ``event``."""
    return Invoker(template).invoke(function_logical_id, event)
