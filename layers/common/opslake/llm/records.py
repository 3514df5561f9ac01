"""Model calls as op records: each HTTP attempt becomes one row of ``ops`` (``source`` "llm"),
so the lake shows what the model cost (tokens), how slow it was and how often it failed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from opslake.models.ids import new_ulid
from opslake.models.ops import LLM_SOURCE, MAX_ERROR_CHARS, QueuedOp
from opslake.observability import logger, metrics

if TYPE_CHECKING:
    from opslake.llm.client import LlmCall, LlmClient
    from opslake.queue import OpsQueue

LLM_ENDPOINT = "llm:chat.completions"


def llm_call_op(call: LlmCall, *, agent_id: str, purpose: str) -> QueuedOp:
    """The op record of one model call (``task_class`` says what it was for)."""
    return QueuedOp(
        op_id=new_ulid(int(call.started_at.timestamp() * 1000)),
        ts=call.started_at,
        source=LLM_SOURCE,
        endpoint=LLM_ENDPOINT,
        agent_id=agent_id,
        reporter_id=agent_id,
        success=call.success,
        duration_ms=max(0.0, round(call.latency_ms, 3)),
        error_type=call.error_type,
        error=(call.error or "")[:MAX_ERROR_CHARS] or None,
        task_class=purpose,
        attributes={
            "model": call.model,
            "status": str(call.status) if call.status is not None else "none",
            "attempt": str(call.attempt),
            "tokens_in": str(call.tokens_in),
            "tokens_out": str(call.tokens_out),
        },
    )


def settle_llm_calls(llm: LlmClient | None, queue: OpsQueue | None, *, agent_id: str, purpose: str) -> int:
    """End a run's use of the model: its calls become op records on the queue and the breaker and
    usage state is saved. Neither failure undoes the run's work: a lost record is counted
    (metric ``LlmOpsLost``) and logged, a state that cannot be saved is counted (metric
    ``LlmStateNotSaved``) and logged (the next run starts from the older one, this run's tokens
    and breaker lost). Returns the number of calls made."""
    if llm is None:
        return 0
    calls, llm.calls = list(llm.calls), []
    if calls and queue is not None:
        messages = [llm_call_op(call, agent_id=agent_id, purpose=purpose).to_message() for call in calls]
        try:
            queue.send(messages)
        except Exception as exc:  # the queue's own retries are spent
            metrics.add_metric(name="LlmOpsLost", unit="Count", value=len(messages))
            logger.error("LLM call records could not be enqueued", count=len(messages), error=str(exc)[:300])
    try:
        llm.save_state()
    except Exception as exc:
        metrics.add_metric(name="LlmStateNotSaved", unit="Count", value=1)
        logger.error("LLM state could not be saved", error=str(exc)[:300])
    return len(calls)
