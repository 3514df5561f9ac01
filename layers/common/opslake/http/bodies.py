"""Validate a tool's request body or query inside the route, so a bad request is observed too.

Powertools runs its request validation *before* every user middleware, so a body it refuses never
reaches the observation middleware and leaves no op record. Tools whose bad input should be in the
lake validate here instead: a failure raises the 400 the one error mapping makes of Powertools'
``RequestValidationError`` (each field and what is wrong with it), so answer and record agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from opslake.http.responses import as_opslake_error

M = TypeVar("M", bound=BaseModel)


def parse_body(model: type[M], body: str | None) -> M:
    """The JSON body as ``model`` (an empty body is an empty object)."""
    try:
        return model.model_validate_json(body or "{}")
    except ValidationError as exc:
        raise as_opslake_error(RequestValidationError(exc.errors(include_url=False), body=body)) from exc


def parse_query(model: type[M], query: Mapping[str, str] | None) -> M:
    """The query string parameters as ``model`` (values are strings; pydantic converts them)."""
    try:
        return model.model_validate(dict(query or {}))
    except ValidationError as exc:
        raise as_opslake_error(RequestValidationError(exc.errors(include_url=False))) from exc
