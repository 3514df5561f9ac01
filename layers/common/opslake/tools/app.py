"""Everything a gateway tool handler shares: an observed resolver and the query engine."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from opslake import runtime
from opslake.http.responses import create_resolver
from opslake.ingest.observe import Observer, observe


def create_tool_app(*, enable_validation: bool = False) -> APIGatewayRestResolver:
    """A resolver whose every call becomes an op record (see :mod:`opslake.ingest.observe`).

    Powertools' request validation runs before any middleware, so a request it refused would
    leave no op record: tools validate inside the route with :mod:`opslake.http.bodies` instead.
    """
    return observe(
        create_resolver(enable_validation=enable_validation), Observer(runtime.ops_queue, runtime.key_names)
    )


query_engine = runtime.query_engine  # the tools' engine (one per container)
