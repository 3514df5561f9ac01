"""HTTP plumbing shared by every API Lambda: the resolver, JSON answers and the one mapping of
errors to status codes (``responses``), body and query parsing (``bodies``), and who the caller
is (``identity``: the API key, the only identity opslake knows)."""

from opslake.http.bodies import parse_body, parse_query
from opslake.http.identity import KeyNameResolver, apigateway_key_lookup, caller_key_id
from opslake.http.responses import as_opslake_error, create_resolver, json_response

__all__ = [
    "KeyNameResolver",
    "apigateway_key_lookup",
    "as_opslake_error",
    "caller_key_id",
    "create_resolver",
    "json_response",
    "parse_body",
    "parse_query",
]
