"""Everything a gateway tool handler shares: an observed resolver and its query engine."""

from __future__ import annotations

from functools import lru_cache

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from opslake import runtime
from opslake.api import create_resolver
from opslake.config import get_settings
from opslake.observe import Observer, observe
from opslake.query.base import QueryEngine


def create_tool_app(*, enable_validation: bool = False) -> APIGatewayRestResolver:
    """A resolver whose every call becomes an op record (see :mod:`opslake.observe`).

    Powertools' request validation runs before any middleware, so a request it refused would
    leave no op record: tools validate inside the route with :mod:`opslake.bodies` instead.
    """
    return observe(
        create_resolver(enable_validation=enable_validation), Observer(runtime.ops_queue, runtime.key_names)
    )


@lru_cache(maxsize=1)
def query_engine() -> QueryEngine:
    from opslake.query.factory import create_engine

    settings = get_settings()
    if settings.query_engine == "athena":
        return create_engine(settings, athena_client=runtime.client("athena"))
    return create_engine(settings)
