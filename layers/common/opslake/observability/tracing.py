"""The service's one Tracer (X-Ray, through Powertools), built when the first event arrives.

Building a Powertools Tracer imports the X-Ray SDK (with wrapt, which imports importlib.metadata)
and patches botocore, which imports ``botocore.client``: together most of a request-path cold import
beyond ``/health``'s. Handlers therefore wrap their entry point with :func:`traced`, which builds
the tracer on the first invocation, before that invocation's first AWS call, so every botocore call
is still an X-Ray subsegment; in Lambda the SDK samples locally and reads the trace header Lambda
sets (active tracing), so no sampling client is built. Only botocore is patched: it is the only
library opslake calls AWS through, and ``patch_all`` would also import sqlite3 and probe a dozen
other libraries.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from aws_lambda_powertools import Tracer

#: The libraries whose calls become subsegments (the X-Ray SDK's names).
PATCHED_MODULES = ("botocore",)

Handler = TypeVar("Handler", bound=Callable[..., Any])


@cache
def get_tracer() -> Tracer:
    """The container's one Tracer (built once; Powertools shares its configuration class-wide)."""
    from aws_lambda_powertools import Tracer

    return Tracer(service="opslake", patch_modules=PATCHED_MODULES)


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
