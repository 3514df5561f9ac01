"""HTTP plumbing shared by every API Lambda: the resolver, JSON answers and the one mapping of
errors to status codes (``responses``), body and query parsing (``bodies``), and who the caller
is (``identity``: the API key, the only identity opslake knows), and the OpenAPI document of
every route (``openapi``).

Names resolve lazily: ``identity`` is needed by every function (``runtime``), the Powertools
event handler behind ``responses`` and ``bodies`` only by API functions.
"""

from opslake._lazy import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "bodies": ("check_json_depth", "parse_body", "parse_query", "raw_body", "request_body"),
        "identity": ("KeyNameResolver", "apigateway_key_lookup", "caller_key_id"),
        "openapi": ("openapi_document", "operations", "server_url"),
        "responses": ("as_opslake_error", "create_resolver", "json_response", "report_error"),
    },
)
