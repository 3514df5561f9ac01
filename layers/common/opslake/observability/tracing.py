"""The service's one Tracer (X-Ray, through Powertools), built when the first event arrives.

Building a Powertools Tracer imports the X-Ray SDK (with wrapt, which imports importlib.metadata)
and patches botocore, which imports ``botocore.client``: together most of a request-path cold import
beyond ``/health``'s. Handlers therefore wrap their entry point with :func:`traced`, which builds
the tracer on the first invocation, before that invocation's first AWS call, so every botocore call
is still an X-Ray subsegment. In Lambda the SDK takes the sampling decision from the trace header
Lambda sets (active tracing) and builds no sampling client (outside Lambda it builds a botocore
client to poll sampling rules: measure cold starts with ``LAMBDA_TASK_ROOT`` set). Only the libraries opslake calls out with
are patched: botocore (every AWS call), the standard library's http.client (``httplib``: GET
/model's urllib probe of the LLM endpoint; under a 1 ms, it imports only urllib3's connection module,
which botocore has loaded already) and, where installed (the data layer: the analyzer's LLM
calls), httpx; ``patch_all`` would also import sqlite3 and probe a dozen other libraries.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from aws_lambda_powertools import Tracer

#: The libraries whose calls become subsegments (the X-Ray SDK's names), each if installed.
PATCHED_MODULES = ("botocore", "httplib", "httpx")
#: The module each X-Ray SDK name patches, where the names differ (``httplib`` is http.client).
_IMPORT_NAMES = {"httplib": "http.client"}

Handler = TypeVar("Handler", bound=Callable[..., Any])


@cache
def get_tracer() -> Tracer:
    """The container's one Tracer (built once; Powertools shares its configuration class-wide)."""
    from aws_lambda_powertools import Tracer

    # find_spec imports nothing: the request-path functions have no httpx (only the common layer)
    installed = [
        name
        for name in PATCHED_MODULES
        if importlib.util.find_spec(_IMPORT_NAMES.get(name, name)) is not None
    ]
    return Tracer(service="opslake", patch_modules=installed)


def traced(handler: Handler) -> Handler:
    """``handler`` under the Tracer's ``capture_lambda_handler`` (a ``## handler`` subsegment with
    the ColdStart and Service annotations), the tracer built on the first call instead of at import."""
    captured: list[Callable[..., Any]] = []

    @functools.wraps(handler)
    def entry(event: Any, context: Any) -> Any:
        if not captured:
            captured.append(get_tracer().capture_lambda_handler(handler))
        return captured[0](event, context)

    return entry  # type: ignore[return-value]


__all__ = ["PATCHED_MODULES", "get_tracer", "traced"]
