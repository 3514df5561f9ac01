"""Who is calling: the identity of the API key API Gateway authenticated.

API Gateway checks the key before the Lambda runs and puts its id in
``requestContext.identity.apiKeyId``. The identity recorded in op records is the key's *name*
(readable in Athena), looked up once per key per container, or the id if the lookup fails.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opslake.errors import ForbiddenError
from opslake.observability import logger


class KeyNameResolver:
    """Maps API key ids to names with a per-container cache."""

    def __init__(self, lookup: Callable[[str], str] | None = None) -> None:
        self._lookup = lookup
        self._names: dict[str, str] = {}

    def name_of(self, key_id: str) -> str:
        if key_id in self._names:
            return self._names[key_id]
        name = key_id
        if self._lookup is not None:
            try:
                name = self._lookup(key_id) or key_id
            except Exception as exc:  # the id is still a true identity: degrade, don't fail the call
                logger.warning("api key name lookup failed; using the key id", key_id=key_id, error=str(exc))
                return key_id  # not cached: try again on the next call
        self._names[key_id] = name
        return name


def apigateway_key_lookup(client: Any) -> Callable[[str], str]:
    """A lookup backed by API Gateway's ``GetApiKey`` (needs ``apigateway:GET`` on /apikeys/*)."""

    def lookup(key_id: str) -> str:
        return str(client.get_api_key(apiKey=key_id)["name"])

    return lookup


def caller_key_id(request_context: dict[str, Any]) -> str:
    """The authenticated key id, or 403 if the request somehow arrived without one."""
    key_id = (request_context.get("identity") or {}).get("apiKeyId")
    if not key_id:
        raise ForbiddenError("this route requires an API key (send it in the x-api-key header)")
    return str(key_id)
