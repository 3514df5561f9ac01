"""The playbook contract: entries the consolidator distils from repeated successes and failures,
and the one snapshot object (``s3://<lake>/playbooks/current.json``) that ``GET /playbooks`` serves.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from opslake.models.ops import Id, UtcMs

MAX_TRIGGER_CHARS = 80
MAX_ACTION_CHARS = 120
MAX_EXCERPT_CHARS = 300
MAX_EVIDENCE = 50


class PlaybookEntry(BaseModel):
    """One piece of advice: when ``trigger`` holds, ``do`` (or ``avoid``) ``action``."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    entry_id: Id
    trigger: Annotated[str, Field(min_length=1, max_length=MAX_TRIGGER_CHARS)]
    action: Annotated[str, Field(min_length=1, max_length=MAX_ACTION_CHARS)]
    kind: Literal["do", "avoid"]
    confidence: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    domain: Id = Field(description="what the advice is about, e.g. sql, staffing, search")
    scope: Literal["project", "global"] = "project"
    endpoint: Id | None = None
    task_class: Id | None = None
    evidence_op_ids: Annotated[list[Id], Field(max_length=MAX_EVIDENCE)] = Field(default_factory=list)
    evidence_excerpts: Annotated[
        list[Annotated[str, Field(max_length=MAX_EXCERPT_CHARS)]], Field(max_length=MAX_EVIDENCE)
    ] = Field(default_factory=list)
    status: Literal["candidate", "active", "retired"] = "candidate"
    created_at: UtcMs
    retired_at: UtcMs | None = None

    def matches(self, *, endpoint: str | None, task_class: str | None, words: list[str]) -> bool:
        """Whether the entry applies: same endpoint/task class (or none named), every word found."""
        if endpoint and self.endpoint not in (None, endpoint):
            return False
        if task_class and self.task_class not in (None, task_class):
            return False
        text = f"{self.trigger} {self.action}".lower()
        return all(word in text for word in words)

    def served(self) -> dict[str, object]:
        """What an agent gets: the advice and its provenance, not the raw evidence excerpts
        (agent-written text is data for analysts, never instructions passed to other agents)."""
        return {
            **self.model_dump(mode="json", exclude={"evidence_excerpts", "evidence_op_ids", "retired_at"}),
            "evidence_count": len(self.evidence_op_ids),
            "evidence_op_ids": self.evidence_op_ids[:5],
        }


class PlaybookSnapshot(BaseModel):
    """The consolidator's current view: every entry, whatever its status."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    generated_at: UtcMs
    entries: list[PlaybookEntry] = Field(default_factory=list)

    def select(
        self,
        *,
        endpoint: str | None = None,
        task_class: str | None = None,
        q: str | None = None,
        limit: int = 10,
    ) -> list[PlaybookEntry]:
        """Active entries that match, most confident first (then newest)."""
        words = (q or "").lower().split()
        found = [
            e
            for e in self.entries
            if e.status == "active" and e.matches(endpoint=endpoint, task_class=task_class, words=words)
        ]
        found.sort(key=lambda e: (-e.confidence, -e.created_at.timestamp(), e.entry_id))
        return found[:limit]
