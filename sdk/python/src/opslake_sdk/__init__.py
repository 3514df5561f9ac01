"""opslake-sdk: report an AI agent's tool calls to opslake, and read back what it learned.

    import opslake_sdk
    ol = opslake_sdk.Opslake()          # OPSLAKE_URL, OPSLAKE_API_KEY (and OPSLAKE_AGENT_ID)

    @ol.observe()
    def query_db(sql: str) -> list[dict]: ...

``opslake_sdk.otel`` (extra ``otel``) points an existing OpenTelemetry setup at opslake instead;
it is imported on first use, so the base package needs only httpx.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from opslake_sdk.client import FOLLOWED_ENDPOINT, FOLLOWED_EVENT_KIND, Opslake
from opslake_sdk.observe import Op
from opslake_sdk.playbooks import PlaybookEntry, Playbooks
from opslake_sdk.retry import RetryPolicy
from opslake_sdk.stats import Stats

if TYPE_CHECKING:
    from opslake_sdk import otel as otel  # typed access to the lazy attribute

# A library logs, the application decides where to: no output unless logging is configured.
logging.getLogger("opslake_sdk").addHandler(logging.NullHandler())

__all__ = [
    "FOLLOWED_ENDPOINT",
    "FOLLOWED_EVENT_KIND",
    "Op",
    "Opslake",
    "PlaybookEntry",
    "Playbooks",
    "RetryPolicy",
    "Stats",
    "__version__",
]  # not "otel": ``from opslake_sdk import *`` must work without the extra


def __getattr__(name: str) -> Any:
    """``opslake_sdk.otel`` on first use (it imports the OpenTelemetry SDK). Without the extra
    this is an AttributeError, so ``hasattr``, ``dir``-walking tools and ``getattr(m, n, None)``
    see a missing attribute rather than an exception they do not expect."""
    if name == "otel":
        try:
            return importlib.import_module("opslake_sdk.otel")
        except ImportError as exc:
            raise AttributeError(f"opslake_sdk.otel is not available: {exc}") from exc
    raise AttributeError(f"module 'opslake_sdk' has no attribute {name!r}")
