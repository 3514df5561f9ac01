"""What a function builds once per container and reuses: clients, queue, key names, engine.

Everything here is lazy (built on first use, inside an invocation) so that importing a handler
stays cheap and tests can point the environment at moto before anything is created. The clients a
function keeps come from one botocore session (not boto3's): the request path uses nothing boto3
adds (resources, s3transfer), and importing boto3 costs ≈ 25 ms more than botocore alone.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, lru_cache
from typing import Any, Literal

from aws_lambda_powertools.utilities.typing import LambdaContext

from opslake.config import get_settings
from opslake.http.identity import KeyNameResolver, apigateway_key_lookup
from opslake.query.base import QueryEngine
from opslake.queue import SqsOpsQueue

#: Every AWS client retries the botocore way: "standard" mode backs off exponentially with jitter
#: on throttling and transient errors under a retry quota (3 attempts unless AWS_MAX_ATTEMPTS says
#: otherwise). No code of ours repeats a call botocore already retried.
RETRY_MODE: Literal["standard"] = "standard"


def boto_config(**overrides: Any) -> Any:
    """The botocore ``Config`` of every client opslake builds (Lambda, local stack and CLI alike)."""
    from botocore.config import Config

    return Config(retries={"mode": RETRY_MODE}, **overrides)


def new_client(service: str, **kwargs: Any) -> Any:
    """A new boto3 client with the retry configuration (``kwargs``: endpoint, region, credentials)."""
    import boto3

    return boto3.client(service, config=boto_config(), **kwargs)  # type: ignore[call-overload]


@cache
def session() -> Any:
    """This container's botocore session: its one loader reads each service model, the endpoint
    rules and the partitions once for all the container's clients (credentials and region from
    the environment, like boto3's default session)."""
    import botocore.session

    return botocore.session.get_session()


@cache
def client(service: str) -> Any:
    """This container's client for ``service`` (built on first use, then reused), with the retry
    configuration of :func:`new_client`."""
    return session().create_client(service, config=boto_config())


@lru_cache(maxsize=1)
def ops_queue() -> SqsOpsQueue:
    settings = get_settings()
    settings.require("ops_queue_url")
    return SqsOpsQueue(
        client("sqs"), settings.ops_queue_url, max_message_bytes=settings.ops_message_max_bytes
    )


@lru_cache(maxsize=1)
def key_names() -> KeyNameResolver:
    lookup = apigateway_key_lookup(client("apigateway")) if get_settings().resolve_key_names else None
    return KeyNameResolver(lookup)


@lru_cache(maxsize=1)
def query_engine() -> QueryEngine:
    """The configured engine: Athena on AWS, the embedded engine in the local stack."""
    from opslake.query.factory import create_engine

    settings = get_settings()
    if settings.query_engine == "athena":
        return create_engine(settings, athena_client=client("athena"))
    return create_engine(settings)


def reset() -> None:
    """Forget everything built so far (tests and the local stack, after changing the environment)."""
    for cached in (session, client, ops_queue, key_names, query_engine):
        cached.cache_clear()


def api_handler(app: Any) -> Callable[[dict, LambdaContext], dict]:
    """The Lambda entry point for a resolver, with the service's logging, tracing and metrics."""
    from aws_lambda_powertools.logging import correlation_paths

    from opslake.observability import logger, metrics
    from opslake.observability.tracing import traced

    @logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
    @traced  # the X-Ray SDK is loaded by the first request, not by the import (see tracing)
    @metrics.log_metrics
    def handler(event: dict, context: LambdaContext) -> dict:
        return app.resolve(event, context)

    return handler


def job_handler(job: str, run: Callable[[Any], dict[str, Any]]) -> Callable[[dict, LambdaContext], dict]:
    """The Lambda entry point of a scheduled job: a schedule event runs ``run(None)``, a
    ``{"since", "until"}`` event runs ``run(backfill)``; anything else is answered with what was
    wrong (a retry would not help, so it does not raise)."""
    from opslake.jobs.trigger import JobInputError, parse_trigger
    from opslake.observability import logger, metrics
    from opslake.observability.tracing import traced

    @logger.inject_lambda_context
    @traced
    @metrics.log_metrics
    def handler(event: dict, context: LambdaContext) -> dict[str, Any]:
        try:
            backfill = parse_trigger(event)
        except JobInputError as exc:
            logger.error(f"{job} invocation refused", error=str(exc))
            return {"status": "invalid_input", "error": str(exc)}
        return run(backfill)

    return handler
