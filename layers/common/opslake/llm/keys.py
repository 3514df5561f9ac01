"""Where the LLM API key comes from: Secrets Manager or SSM, through Powertools parameters (cached).

``llm_api_key_parameter`` names the store by its shape:

* ``arn:aws:secretsmanager:…`` — a Secrets Manager secret, by ARN;
* ``secret:<name>`` — a Secrets Manager secret, by name (the prefix is dropped);
* anything else (e.g. ``/opslake/llm-api-key``) — an SSM parameter, read with decryption
  (a SecureString);
* empty — no key: requests go without an ``Authorization`` header (local model servers).

A secret may hold the bare key or a JSON object with an ``api_key`` (or a single) field.
Powertools imports boto3, so it is imported only when a key is actually read; its provider gets a
client from :func:`opslake.runtime.new_client` (botocore's standard retries, like every client).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from typing import Any

from opslake.llm.errors import LlmKeyError

SECRET_PREFIX = "secret:"
SECRETS_MANAGER_ARN_PREFIX = "arn:aws:secretsmanager:"
KEY_MAX_AGE_S = 300
_JSON_KEY_FIELDS = ("api_key", "apiKey", "key", "token")


def key_source(parameter: str) -> tuple[str, str] | None:
    """``("secretsmanager" | "ssm", name)`` for a parameter setting, or None when no key is configured."""
    parameter = parameter.strip()
    if not parameter:
        return None
    if parameter.startswith(SECRETS_MANAGER_ARN_PREFIX):
        return "secretsmanager", parameter
    if parameter.startswith(SECRET_PREFIX):
        return "secretsmanager", parameter[len(SECRET_PREFIX) :]
    return "ssm", parameter


def _key_from_secret(value: str) -> str:
    """The key in a secret string: the string itself, or the key field of a JSON object."""
    text = value.strip()
    if text.startswith("{"):
        try:
            document = json.loads(text)
        except ValueError:
            return text
        if isinstance(document, dict):
            for field in _JSON_KEY_FIELDS:
                if isinstance(document.get(field), str):
                    return str(document[field])
            strings = [v for v in document.values() if isinstance(v, str)]
            if len(strings) == 1:
                return strings[0]
            raise LlmKeyError(f"the secret is a JSON object without an {_JSON_KEY_FIELDS[0]!r} field")
    return text


@cache
def provider(kind: str) -> Any:
    """This container's Powertools provider for ``kind`` ("secretsmanager" or "ssm"), on a client
    built the opslake way; it caches the values it reads for their ``max_age``."""
    from aws_lambda_powertools.utilities import parameters

    from opslake import runtime

    if kind == "secretsmanager":
        return parameters.SecretsProvider(boto3_client=runtime.new_client(kind))
    return parameters.SSMProvider(boto3_client=runtime.new_client(kind))


def fetch_api_key(parameter: str, *, max_age_s: int = KEY_MAX_AGE_S) -> str | None:
    """The API key named by ``parameter`` (cached by Powertools for ``max_age_s``), or None if unset."""
    source = key_source(parameter)
    if source is None:
        return None
    kind, name = source
    from aws_lambda_powertools.utilities.parameters import GetParameterError

    try:
        if kind == "secretsmanager":
            value = provider(kind).get(name, max_age=max_age_s)
        else:
            value = provider(kind).get(name, decrypt=True, max_age=max_age_s)
    except GetParameterError as exc:
        raise LlmKeyError(f"could not read the LLM API key from {kind} {name!r}: {exc}") from exc
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str) or not value.strip():
        raise LlmKeyError(f"the LLM API key in {kind} {name!r} is empty")
    return _key_from_secret(value) if kind == "secretsmanager" else value.strip()


def key_loader(parameter: str, *, max_age_s: int = KEY_MAX_AGE_S) -> Callable[[], str | None]:
    """A zero-argument function the client calls (lazily) for the key."""
    return lambda: fetch_api_key(parameter, max_age_s=max_age_s)
