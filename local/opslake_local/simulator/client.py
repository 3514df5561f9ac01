"""One task's HTTP side: every tool call goes to the local API with the agent's key and the task's
session and class headers, and what only the runtime knows is reported to ``POST /events`` or, for
a fleet that reports through OTLP, as spans of the task's trace (:mod:`.otlp`); each call and
report leaves its trace in the cycle's :class:`CycleStats`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import httpx

from opslake_local.simulator.agents import SimAgent
from opslake_local.simulator.otlp import ModelCall, TaskSpans
from opslake_local.simulator.stats import Call, CycleStats

SESSION_HEADER = "x-opslake-session-id"
TASK_CLASS_HEADER = "x-opslake-task-class"
TRACE_HEADER = "x-opslake-trace-id"


def sig_hash(endpoint: str, error: str | None) -> str:
    """How the simulated runtime names a failure for /events: 16 hex of sha256("endpoint error")."""
    return hashlib.sha256(f"{endpoint} {error or ''}".encode()).hexdigest()[:16]


class TaskClient:
    """The HTTP calls of one task by one agent, counted in ``stats`` (``turn`` is the number of tool
    calls made so far: the runtime's turn in its reports). With ``spans`` (the task's trace) the
    runtime reports as spans and every tool call names the task's trace id."""

    def __init__(
        self,
        http: httpx.Client,
        stats: CycleStats,
        agent: SimAgent,
        task_class: str,
        session: str,
        spans: TaskSpans | None = None,
    ) -> None:
        self.http, self.stats, self.agent, self.task_class = http, stats, agent, task_class
        self.headers = {
            "x-api-key": agent.api_key,
            SESSION_HEADER: session,
            TASK_CLASS_HEADER: task_class,
        }
        if spans is not None:
            self.headers[TRACE_HEADER] = spans.trace_id
        self.session = session
        self.spans = spans
        self.turn = 0

    def call(
        self,
        method: str,
        path: str,
        route: str,
        *,
        body: Any = None,
        raw: bytes | None = None,
        params: Mapping[str, str | int] | None = None,
        mode: str | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """One tool call; returns (status, JSON body) and records it."""
        self.turn += 1
        headers = dict(self.headers)
        content = raw
        if body is not None:
            content = json.dumps(body).encode()
        if content is not None:
            headers["content-type"] = "application/json"
        response = self.http.request(method, path, content=content, params=params, headers=headers)
        try:
            payload = response.json()
        except ValueError:
            payload = {}
        payload = payload if isinstance(payload, dict) else {"value": payload}
        error = None
        if response.status_code >= 400:
            error = str(payload.get("error") or payload.get("message") or f"http_{response.status_code}")
            self.stats.tool_failures += 1
            self.stats.failures_seen += 1
            self.stats.errors[f"{method} {route} {response.status_code} {error}"] += 1
        # Reading playbooks is the fleet's overhead, not task work: counting it would lower the
        # failure rate of the fleet that reads them for free.
        if route != "/playbooks":
            self.stats.tool_calls += 1
        self.stats.calls.append(
            Call(self.agent.agent_id, self.task_class, method, route, response.status_code, error, mode)
        )
        return response.status_code, payload

    def events(self, *ops: dict[str, Any], model: ModelCall | None = None) -> None:
        """Report runtime-side ops (the simulated runtime's own knowledge): to POST /events, or as
        one span each in the task's trace (``model``: the ops are the runtime's model calls)."""
        base = {
            "agent_id": self.agent.agent_id,
            "session_id": self.session,
            "task_class": self.task_class,
        }
        if self.spans is not None:
            for op in ops:
                self.spans.report({**base, **op}, model)
            self.stats.spans_reported += len(ops)
            return
        body = {"ops": [{**base, **op} for op in ops]}
        response = self.http.post("/events", json=body, headers={"x-api-key": self.agent.api_key})
        if response.status_code == 202:
            self.stats.events_posted += len(response.json().get("accepted", []))
