"""GET /model: which LLM the analyzer diagnoses with, whether it answers, and how it has fared."""

import threading
import time
from typing import Any

from cachetools import TTLCache, cached

from opslake import runtime
from opslake.config import get_settings
from opslake.ingest.observe import summarize
from opslake.models.llm import LlmState
from opslake.tools.app import create_tool_app
from opslake.tools.snapshots import CachedJsonObject, SnapshotUnavailableError

settings = get_settings()
settings.require("lake_bucket")
app = create_tool_app()
STATE_KEY = settings.llm_state_key  # where the analyzer's LLM client saves its state
PROBE_TIMEOUT_S = 2.0
PROBE_TTL_S = 60.0

state = CachedJsonObject(
    lambda: runtime.client("s3"),
    settings.lake_bucket,
    STATE_KEY,
    LlmState.model_validate,
    ttl_s=settings.snapshot_cache_s,
)
#: The last probe's answer, for a minute: callers may poll /model, the endpoint need not be.
_probe: TTLCache[Any, bool] = TTLCache(maxsize=1, ttl=PROBE_TTL_S, timer=time.monotonic)


@cached(_probe, lock=threading.Lock())  # cachetools is not thread-safe on its own
def reachable(base_url: str) -> bool:
    """Whether ``GET {base_url}/models`` gets any HTTP answer below 500 within 2 s (cached 60 s).

    No API key is sent: a 401 still proves the endpoint is up, and the key never leaves its store.
    """
    # Imported here (http.client, email): the first request loads them anyway, with botocore.
    import urllib.error
    import urllib.request

    request = urllib.request.Request(base_url.rstrip("/") + "/models", method="GET")
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S) as response:
            ok = response.status < 500
    except urllib.error.HTTPError as exc:
        ok = exc.code < 500
    except (urllib.error.URLError, OSError, ValueError):
        ok = False
    return ok


@app.get("/model")
def get_model() -> dict[str, Any]:
    configured = bool(settings.llm_base_url and settings.llm_model)
    try:
        current: LlmState | None = state.get()
    except SnapshotUnavailableError:
        current = None  # the answer says the state is unknown rather than failing the call
    llm_in_use = configured and current is not None and current.circuit_breaker != "open"
    answer = {
        "provider": settings.llm_provider,
        "model": settings.llm_model or None,
        "configured": configured,
        "reachable": reachable(settings.llm_base_url) if configured else None,
        "diagnoser": "llm" if llm_in_use else "heuristic",
        "circuit_breaker": current.circuit_breaker if current else None,
        "recent_error_rate": current.recent_error_rate if current else None,
        "tokens_in_24h": current.tokens_in_24h if current else None,
        "tokens_out_24h": current.tokens_out_24h if current else None,
        "state_updated_at": current.updated_at.isoformat() if current else None,
    }
    summarize(app, f"{answer['diagnoser']} diagnoser, model {answer['model'] or 'not configured'}")
    return answer


handler = runtime.api_handler(app)
