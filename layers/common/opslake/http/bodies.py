"""Read a request's body as JSON text, and validate a tool's body or query inside the route.

Every route that reads a body gets it through :func:`request_body`, so every bad body is a 4xx that
says why instead of a crash: a ``Content-Encoding`` (gzip, …) is refused with 415, as is a content
type that is not JSON (a missing one is accepted: agents' HTTP clients often leave it out); the bytes
must be UTF-8 (400 otherwise: API Gateway hands binary bodies over base64-encoded, and Powertools'
``decoded_body`` would raise ``UnicodeDecodeError``); and :func:`check_json_depth` refuses JSON nested
deeper than :data:`MAX_JSON_DEPTH` before any recursive parser sees it.

gzip is refused rather than decoded: API Gateway's 10 MB limit and opslake's 1 MB limit count the
compressed bytes, so decoding would need its own bounds against a small body that inflates to
gigabytes, while agents' op batches and queries are small enough that compression saves nothing.

Powertools runs its request validation *before* every user middleware, so a body it refuses never
reaches the observation middleware and leaves no op record. Tools whose bad input should be in the
lake validate here instead: a failure raises the 400 the one error mapping makes of Powertools'
``RequestValidationError`` (each field and what is wrong with it), so answer and record agree.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from itertools import accumulate
from typing import TYPE_CHECKING, TypeVar

from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from opslake.errors import JsonTooDeepError, UndecodableBodyError, UnsupportedMediaTypeError
from opslake.http.responses import as_opslake_error

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

M = TypeVar("M", bound=BaseModel)

#: Deepest JSON nesting a body may have (ops and tool requests nest 3 or 4 levels).
MAX_JSON_DEPTH = 64
# JSON strings (escapes included) are removed so that brackets in text do not count, then all but
# brackets: regexes keep the check linear and free of recursion.
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"?', re.S)  # to the end when unterminated
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_JSON_MEDIA_TYPE = re.compile(r"application/(?:[\w.+-]*\+)?json", re.I)


def request_body(event: APIGatewayProxyEvent) -> str | None:
    """The body of a request that should carry JSON, as text; 415 or 400 saying why it cannot be."""
    headers = event.headers or {}
    encoding = (headers.get("content-encoding") or "").strip().lower()
    if encoding not in ("", "identity"):
        raise UnsupportedMediaTypeError(
            f"Content-Encoding {encoding[:40]!r} is not accepted: send the JSON body uncompressed "
            "(it is limited to 1 MB either way)",
            detail={"header": "Content-Encoding", "accepted": ["identity"]},
        )
    content_type = (headers.get("content-type") or "").split(";", 1)[0].strip()
    if content_type and not _JSON_MEDIA_TYPE.fullmatch(content_type):
        raise UnsupportedMediaTypeError(
            f"Content-Type {content_type[:80]!r} is not accepted: send JSON with "
            "Content-Type: application/json",
            detail={"header": "Content-Type", "accepted": ["application/json"]},
        )
    if event.body is None:
        return None
    raw = raw_body(event)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UndecodableBodyError(
            f"the request body is not valid UTF-8 (byte {exc.start}); send JSON encoded as UTF-8",
            detail={"byte": exc.start},
        ) from None


def raw_body(event: APIGatewayProxyEvent) -> bytes:
    """The body's bytes as the client sent them: API Gateway hands binary media types (with ``*/*``,
    every body) over base64-encoded; 400 when the base64 is broken."""
    body = event.body or ""
    if event.is_base64_encoded:
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise UndecodableBodyError("the request body is marked base64 but is not valid base64") from None
    try:
        return body.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from a \ud800 in the proxy event: not UTF-8 text
        return b"\xff"


def check_json_depth(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse JSON nesting deeper than ``limit`` (400) without parsing it: Python's ``json`` recurses
    once per level and raises ``RecursionError`` near 1,000 levels."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    # Strings out, then only brackets are left: the deepest prefix is found in C (a token loop in
    # Python cost 20 µs per op of a 500-op POST /events).
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    if len(brackets) > limit and max(accumulate(map(_BRACKET_STEP.__getitem__, brackets.encode()))) > limit:
        raise JsonTooDeepError(
            f"the JSON body nests more than {limit} levels deep; flatten it", detail={"max_depth": limit}
        )


def parse_body(model: type[M], body: str | None) -> M:
    """The JSON body as ``model`` (an empty body is an empty object)."""
    text = body or "{}"
    check_json_depth(text)
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        raise as_opslake_error(RequestValidationError(exc.errors(include_url=False), body=body)) from exc


def parse_query(model: type[M], query: Mapping[str, str] | None) -> M:
    """The query string parameters as ``model`` (values are strings; pydantic converts them)."""
    try:
        return model.model_validate(dict(query or {}))
    except ValidationError as exc:
        raise as_opslake_error(RequestValidationError(exc.errors(include_url=False))) from exc
