"""A local API Gateway (REST, v1 proxy integration) for the routes in template.yaml.

Requests become the same proxy events API Gateway sends, API keys are enforced the way API
Gateway enforces them (403 ``Forbidden`` before any handler runs), unknown routes answer 403
``Missing Authentication Token`` and bodies over 10 MB answer 413, so clients see locally what
they will see in the cloud.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from opslake_local.invoke import FunctionError, Invokes
from opslake_local.stack import ApiKey, LocalStack
from opslake_local.template import ApiRoute

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway REST payload limit
API_KEY_HEADER = "x-api-key"


@dataclass(frozen=True)
class GatewayAnswer:
    """An answer API Gateway gives itself, without invoking a function."""

    status: int
    message: str
    error_type: str


FORBIDDEN = GatewayAnswer(403, "Forbidden", "ForbiddenException")
MISSING_TOKEN = GatewayAnswer(403, "Missing Authentication Token", "MissingAuthenticationTokenException")
TOO_LARGE = GatewayAnswer(413, "Request Too Long", "RequestTooLongException")
BAD_GATEWAY = GatewayAnswer(502, "Internal server error", "InternalServerErrorException")


# ---- routing ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompiledRoute:
    """A template route with the regex that matches request paths against it."""

    route: ApiRoute
    pattern: re.Pattern[str]
    literal_segments: int


def compile_route(route: ApiRoute) -> CompiledRoute:
    """``/tables/{name}`` → a regex with a named group per parameter (``{proxy+}`` is greedy)."""
    parts = []
    literal = 0
    for segment in route.path.strip("/").split("/"):
        if segment.startswith("{") and segment.endswith("+}"):
            parts.append(f"(?P<{segment[1:-2]}>.+)")
        elif segment.startswith("{") and segment.endswith("}"):
            parts.append(f"(?P<{segment[1:-1]}>[^/]+)")
        else:
            parts.append(re.escape(segment))
            literal += 1
    return CompiledRoute(route, re.compile("^/" + "/".join(parts) + "/?$"), literal)


class Router:
    """Matches (method, path) to a template route; literal paths win over parameters."""

    def __init__(self, routes: Sequence[ApiRoute]) -> None:
        compiled = [compile_route(r) for r in routes]
        self.routes = sorted(compiled, key=lambda c: (-c.literal_segments, c.route.method == "ANY"))

    def match(self, method: str, path: str) -> tuple[ApiRoute, dict[str, str]] | None:
        """The route and its path parameters, or None (API Gateway then answers 403)."""
        for compiled in self.routes:
            if compiled.route.method not in (method, "ANY"):
                continue
            found = compiled.pattern.match(path)
            if found:  # API Gateway REST hands handlers URL-decoded path parameters
                return compiled.route, {name: unquote(value) for name, value in found.groupdict().items()}
        return None


# ---- API keys -----------------------------------------------------------------------------------
class ApiKeyStore:
    """API key values → keys, read from (moto's) API Gateway; refreshed when a value is unknown
    (a key created after the server started works at once) and at least every ``max_age_s``
    (a revoked or disabled key stops working, as on API Gateway, within that time)."""

    def __init__(self, stack: LocalStack, *, max_age_s: float = 1.0) -> None:
        self._client = stack.client("apigateway")
        self._keys: dict[str, ApiKey] = {}
        self._lock = threading.Lock()
        self._max_age_s = max_age_s
        self._loaded_at = float("-inf")

    def _refresh(self) -> None:
        """Reload enabled keys that belong to at least one usage plan (as API Gateway requires)."""
        planned = set()
        for plan in self._client.get_usage_plans().get("items", []):
            for key in self._client.get_usage_plan_keys(usagePlanId=plan["id"]).get("items", []):
                planned.add(key["id"])
        keys = self._client.get_api_keys(includeValues=True).get("items", [])
        self._keys = {
            k["value"]: ApiKey(id=k["id"], name=k["name"], value=k["value"])
            for k in keys
            if k.get("enabled") and k["id"] in planned
        }
        self._loaded_at = time.monotonic()

    def lookup(self, value: str | None) -> ApiKey | None:
        """The key with this value, if it exists, is enabled and is in a usage plan."""
        if not value:
            return None
        with self._lock:
            if value not in self._keys or time.monotonic() - self._loaded_at > self._max_age_s:
                self._refresh()
            return self._keys.get(value)


# ---- events and responses -----------------------------------------------------------------------
@dataclass(frozen=True)
class HttpRequest:
    """What the HTTP server received, before it becomes a proxy event."""

    method: str
    raw_path: str
    headers: list[tuple[str, str]]
    body: bytes
    source_ip: str


def _multi(pairs: Sequence[tuple[str, str]]) -> tuple[dict[str, str] | None, dict[str, list[str]] | None]:
    """API Gateway's single-value (last wins) and multi-value views of repeated names."""
    if not pairs:
        return None, None
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for name, value in pairs:
        single[name] = value
        multi.setdefault(name, []).append(value)
    return single, multi


def _is_binary(content_type: str, binary_types: Sequence[str]) -> bool:
    """Whether API Gateway would base64-encode a body of this content type."""
    mime = content_type.split(";")[0].strip().lower()
    for pattern in binary_types:
        if pattern == "*/*" or pattern.lower() == mime:
            return True
        if pattern.endswith("/*") and mime.startswith(pattern[:-1].lower()):
            return True
    return False


def build_event(
    request: HttpRequest,
    route: ApiRoute,
    path_parameters: dict[str, str],
    *,
    stage: str,
    api_key: ApiKey | None,
    binary_types: Sequence[str] = (),
    account_id: str = "123456789012",
) -> dict[str, Any]:
    """The REST API (v1) Lambda proxy event API Gateway would send for this request."""
    url = urlsplit(request.raw_path)
    headers, multi_headers = _multi(request.headers)
    query, multi_query = _multi(parse_qsl(url.query, keep_blank_values=True))
    content_type = next((v for k, v in request.headers if k.lower() == "content-type"), "")
    body: str | None = None
    is_base64 = False
    if request.body:
        try:
            if _is_binary(content_type, binary_types):
                raise UnicodeDecodeError("binary", b"", 0, 1, "binary media type")
            body = request.body.decode("utf-8")
        except UnicodeDecodeError:
            body, is_base64 = base64.b64encode(request.body).decode("ascii"), True
    now = datetime.now(UTC)
    request_id = str(uuid.uuid4())
    user_agent = next((v for k, v in request.headers if k.lower() == "user-agent"), None)
    return {
        "resource": route.path,
        "path": url.path,
        "httpMethod": request.method,
        "headers": headers,
        "multiValueHeaders": multi_headers,
        "queryStringParameters": query,
        "multiValueQueryStringParameters": multi_query,
        "pathParameters": path_parameters or None,
        "stageVariables": None,
        "requestContext": {
            "accountId": account_id,
            "apiId": "local",
            "domainName": headers.get("Host", "localhost") if headers else "localhost",
            "domainPrefix": "local",
            "extendedRequestId": request_id,
            "httpMethod": request.method,
            "identity": {
                "sourceIp": request.source_ip,
                "userAgent": user_agent,
                "apiKey": api_key.value if api_key else None,
                "apiKeyId": api_key.id if api_key else None,
                "accessKey": None,
                "accountId": None,
                "caller": None,
                "user": None,
                "userArn": None,
                "cognitoIdentityId": None,
                "cognitoIdentityPoolId": None,
                "cognitoAuthenticationType": None,
                "cognitoAuthenticationProvider": None,
                "principalOrgId": None,
            },
            # The path as called: this gateway serves the stage at the root, as a custom domain
            # mapped at the root does (on an execute-api host it starts with the stage).
            "path": url.path,
            "protocol": "HTTP/1.1",
            "requestId": request_id,
            "requestTime": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "requestTimeEpoch": int(now.timestamp() * 1000),
            "resourceId": "local",
            "resourcePath": route.path,
            "stage": stage,
        },
        "body": body,
        "isBase64Encoded": is_base64,
    }


@dataclass
class HttpResponse:
    """What the server writes back: status, header pairs (repeats allowed) and body bytes."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


def gateway_response(answer: GatewayAnswer, request_id: str) -> HttpResponse:
    """API Gateway's own JSON error answer (no function was invoked)."""
    return HttpResponse(
        answer.status,
        [
            ("Content-Type", "application/json"),
            ("x-amzn-ErrorType", answer.error_type),
            ("x-amzn-RequestId", request_id),
        ],
        json.dumps({"message": answer.message}).encode(),
    )


def proxy_response(result: Any, request_id: str) -> HttpResponse:
    """Turn a handler's proxy result into HTTP; a malformed result is a 502, as in API Gateway."""
    if not isinstance(result, dict) or not isinstance(result.get("statusCode"), int):
        log.error("malformed Lambda proxy response: %r", result)
        return gateway_response(BAD_GATEWAY, request_id)
    pairs: list[tuple[str, str]] = [(k, str(v)) for k, v in (result.get("headers") or {}).items()]
    for name, values in (result.get("multiValueHeaders") or {}).items():
        pairs.extend((name, str(v)) for v in values if (name, str(v)) not in pairs)
    if not any(k.lower() == "content-type" for k, _ in pairs):
        pairs.append(("Content-Type", "application/json"))
    pairs.append(("x-amzn-RequestId", request_id))
    raw = result.get("body") or ""
    body = base64.b64decode(raw) if result.get("isBase64Encoded") else str(raw).encode()
    return HttpResponse(result["statusCode"], pairs, body)


# ---- the server ---------------------------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    """The threading server with a listen backlog for bursts: with socketserver's default of 5,
    a burst of concurrent clients (an agent fleet starting) gets connections reset, which API
    Gateway never does."""

    request_queue_size = 128


class LocalApi:
    """Serves every template route on 127.0.0.1 by invoking the route's function in-process."""

    def __init__(
        self, stack: LocalStack, invoker: Invokes, *, access_log: bool = False, key_max_age_s: float = 1.0
    ) -> None:
        self.stack = stack
        self.invoker = invoker
        self.router = Router(stack.template.api_routes())
        self.keys = ApiKeyStore(stack, max_age_s=key_max_age_s)
        self.access_log = access_log
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def answer(self, request: HttpRequest) -> HttpResponse:
        """Everything API Gateway does for one request, in its order: size, route, key, function."""
        request_id = str(uuid.uuid4())
        if len(request.body) > MAX_BODY_BYTES:
            return gateway_response(TOO_LARGE, request_id)
        path = urlsplit(request.raw_path).path
        matched = self.router.match(request.method, path)
        if matched is None:
            return gateway_response(MISSING_TOKEN, request_id)
        route, path_parameters = matched
        api_key = None
        if route.api_key_required:
            sent = next((v for k, v in request.headers if k.lower() == API_KEY_HEADER), None)
            api_key = self.keys.lookup(sent)
            if api_key is None:
                return gateway_response(FORBIDDEN, request_id)
        event = build_event(
            request,
            route,
            path_parameters,
            stage=self.stack.template.api_stage(route.api_id),
            api_key=api_key,
            binary_types=self.stack.template.api_binary_media_types(route.api_id),
            account_id=self.stack.template.account_id,
        )
        try:
            result = self.invoker.invoke(route.function, event)
        except FunctionError:
            log.exception("%s raised", route.function)
            return gateway_response(BAD_GATEWAY, request_id)
        return proxy_response(result, request_id)

    def start(self, port: int = 0) -> str:
        """Serve in a background thread; returns the base URL."""
        self._server = _Server(("127.0.0.1", port), _handler_class(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="opslake-http", daemon=True)
        self._thread.start()
        return self.base_url

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the local API is not running")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def _handler_class(api: LocalApi) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to ``api`` (http.server instantiates it per request)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "opslake-local"
        # Headers and body go out as two writes: with Nagle on, the body waits for the client's
        # delayed ACK of the headers, ~40 ms on every keep-alive request.
        disable_nagle_algorithm = True

        def _serve(self) -> None:
            started = time.perf_counter()
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                response = gateway_response(TOO_LARGE, str(uuid.uuid4()))
                self.close_connection = True  # the unread body must not be parsed as a request
            else:
                request = HttpRequest(
                    method=self.command,
                    raw_path=self.path,
                    headers=list(self.headers.items()),
                    body=self.rfile.read(length) if length else b"",
                    source_ip=self.client_address[0],
                )
                response = api.answer(request)
            self.send_response(response.status)
            for name, value in response.headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)
            if api.access_log:
                elapsed = (time.perf_counter() - started) * 1000
                print(f"{self.command} {self.path} -> {response.status} ({elapsed:.0f} ms)", flush=True)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _serve

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

    return Handler
