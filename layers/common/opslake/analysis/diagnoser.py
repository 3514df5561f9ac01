"""Diagnose a signature with the configured model, falling back to the heuristic.

The model must answer :class:`DiagnosisAnswer` JSON. An invalid answer (prose, or JSON that breaks
the schema) gets exactly one retry with a reminder; a second invalid answer, or a model that is
unavailable (retries spent, circuit open, quota spent), falls back to the heuristic diagnoser.
Every diagnosis says who produced it (``diagnosed_by``: the model's name or ``heuristic``).

A model's answer passes the lesson fence before it is kept (:func:`answer_refusal`): its advice may
become a served entry's action, and its cause enters the distiller's prompt. A refused answer is
not retried (the same data would steer it again): the heuristic answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opslake.analysis.fence import (
    KnownNames,
    endpoint_refusal,
    instruction_refusal,
    lesson_refusal,
    network_refusal,
)
from opslake.analysis.heuristics import diagnose_heuristically
from opslake.analysis.prompts import diagnosis_messages
from opslake.models.analysis import DiagnosisAnswer, FailureSample, Signature
from opslake.observability import logger

if TYPE_CHECKING:
    from opslake.analysis.catalog.known import Vocabulary
    from opslake.llm import LlmClient

HEURISTIC = "heuristic"
INVALID_ANSWER_REMINDER = (
    "Your previous answer was not valid JSON for the required schema. Answer again with only the "
    "JSON object: cause, agent_adjustment, avoid, category, confidence."
)


def answer_refusal(
    signature: Signature, answer: DiagnosisAnswer, known: KnownNames | None = None
) -> str | None:
    """Why a model's diagnosis may not be kept, else ``None``: its advice must pass the lesson
    fence (it may become an entry's action), its cause must read as data (no instruction to a
    reader, no URL or IP). ``known``: the vocabulary's names (the catalog and the tables)."""
    known = known or KnownNames()
    if endpoint_refusal(signature.endpoint) is None:
        known = known.extended([signature.endpoint])
    reason = lesson_refusal(answer.agent_adjustment, known)
    if reason:
        return f"agent_adjustment: {reason}"
    reason = instruction_refusal(answer.cause) or network_refusal(answer.cause, strict=False)
    return f"cause: {reason}" if reason else None


@dataclass(frozen=True)
class DiagnosisOutcome:
    answer: DiagnosisAnswer
    diagnosed_by: str
    fell_back: bool  # a model was configured but the heuristic answered


class Diagnoser:
    """Model first (when configured), heuristic always available."""

    def __init__(self, llm: LlmClient | None = None, vocabulary: Vocabulary | None = None) -> None:
        self.llm = llm
        #: the tool catalog and tables as the run read them (set by the analyzer each run)
        self.vocabulary = vocabulary

    def _sources(self, signature: Signature) -> list[str]:
        """Tools called before this one in sessions where it failed less than it does overall
        (where its ids come from), the most called first; from calls of enough reporters."""
        vocabulary = self.vocabulary
        tool = vocabulary.tool(signature.endpoint) if vocabulary else None
        if vocabulary is None or tool is None or not tool.calls:
            return []
        rate = tool.failures / tool.calls
        return [
            p.endpoint
            for p in tool.preceded_by
            if vocabulary.vouched(p.witnesses)
            and p.calls
            and p.failures / p.calls < rate
            and p.endpoint in vocabulary.tools
        ][:2]

    @property
    def wants_contrasts(self) -> bool:
        """Whether a prompt will be built (contrasting successes cost a query; skip them otherwise)."""
        return self.llm is not None and self.llm.breaker.state != "open"

    def diagnose(
        self, signature: Signature, samples: Sequence[FailureSample], contrasts: Sequence[str]
    ) -> DiagnosisOutcome:
        sources = self._sources(signature)
        if self.llm is None:
            return DiagnosisOutcome(
                diagnose_heuristically(signature, list(samples), sources), HEURISTIC, False
            )
        from opslake.analysis.playbooks.drafting import catalog_slice
        from opslake.llm import LlmError, LlmInvalidAnswerError

        catalog = catalog_slice(signature.endpoint, self.vocabulary)
        messages = diagnosis_messages(signature, list(samples), list(contrasts), catalog)
        known = self.vocabulary.known_names if self.vocabulary else None
        for attempt in (1, 2):
            try:
                answer = self.llm.complete_json(messages, DiagnosisAnswer, schema_name="diagnosis")
                refusal = answer_refusal(signature, answer.value, known)
                if refusal is None:
                    return DiagnosisOutcome(answer.value, answer.model or self.llm.config.model, False)
                logger.warning(
                    "diagnosis refused by the lesson fence: heuristic diagnosis",
                    signature_id=signature.signature_id,
                    reason=refusal,
                )
                break
            except LlmInvalidAnswerError as exc:
                logger.warning(
                    "invalid diagnosis answer",
                    signature_id=signature.signature_id,
                    attempt=attempt,
                    error=str(exc),
                )
                messages = [*messages, {"role": "user", "content": INVALID_ANSWER_REMINDER}]
            except LlmError as exc:
                logger.warning(
                    "LLM unavailable: heuristic diagnosis",
                    signature_id=signature.signature_id,
                    error=str(exc),
                )
                break
        return DiagnosisOutcome(diagnose_heuristically(signature, list(samples), sources), HEURISTIC, True)
