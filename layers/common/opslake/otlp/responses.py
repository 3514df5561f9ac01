"""OTLP/HTTP answers, in the encoding of the request: ``ExportTraceServiceResponse`` on success
(empty when every span was taken, ``partial_success`` when some were refused) and
``google.rpc.Status`` on failure, whose HTTP status comes from the one error mapping
(:mod:`opslake.http.responses`). Only 429, 502, 503 and 504 invite an exporter to retry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf.message import Message
from google.rpc.code_pb2 import Code
from google.rpc.error_details_pb2 import BadRequest, ErrorInfo
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from opslake.errors import OpslakeError
from opslake.otlp.decode import JSON, PROTOBUF, Encoding
from opslake.otlp.ingest import TraceIngestResult

ERROR_DOMAIN = "opslake"
# HTTP status → the google.rpc code a Status body carries.
_RPC_CODES = {
    400: Code.INVALID_ARGUMENT,
    403: Code.PERMISSION_DENIED,
    404: Code.NOT_FOUND,
    413: Code.RESOURCE_EXHAUSTED,
    415: Code.INVALID_ARGUMENT,
    429: Code.RESOURCE_EXHAUSTED,
    502: Code.UNAVAILABLE,
    503: Code.UNAVAILABLE,
    504: Code.DEADLINE_EXCEEDED,
}


@dataclass(frozen=True)
class OtlpAnswer:
    """An HTTP answer: status, body bytes, content type and extra headers."""

    status: int
    body: bytes
    encoding: Encoding
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def content_type(self) -> str:
        return PROTOBUF if self.encoding == "protobuf" else JSON


def _encode(message: Message, encoding: Encoding) -> bytes:
    if encoding == "protobuf":
        return message.SerializeToString()
    from google.protobuf import json_format  # JSON answers only (a cold start's protobuf exports skip it)

    return json_format.MessageToJson(message, indent=None).encode()


def success_answer(result: TraceIngestResult, encoding: Encoding) -> OtlpAnswer:
    """200: empty when nothing was refused, else ``partial_success`` naming the refused spans."""
    response = ExportTraceServiceResponse()
    if result.rejected:
        response.partial_success.rejected_spans = len(result.rejected)
        response.partial_success.error_message = result.error_message()
    headers = {
        "x-opslake-spans-stored": str(len(result.stored)),
        "x-opslake-spans-skipped": str(result.skipped),
    }
    return OtlpAnswer(200, _encode(response, encoding), encoding, headers)


def _utf8(text: str) -> str:
    """Text a protobuf string can hold: a lone surrogate from a client's JSON escaped, not raised."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def error_answer(error: OpslakeError, encoding: Encoding) -> OtlpAnswer:
    """A ``google.rpc.Status`` carrying the message, opslake's error code as an ErrorInfo, and for
    bad data the ``BadRequest`` the spec asks for (each field and what is wrong with it)."""
    message = _utf8(error.message)
    status = Status(code=_RPC_CODES.get(error.status, Code.INTERNAL), message=message)
    status.details.add().Pack(ErrorInfo(reason=error.code, domain=ERROR_DOMAIN))
    if error.status == 400:
        problems = (
            error.detail if isinstance(error.detail, list) else [{"field": "(body)", "message": message}]
        )
        bad_request = BadRequest()
        for problem in problems:
            if isinstance(problem, dict):
                bad_request.field_violations.add(
                    field=_utf8(str(problem.get("field", "(body)"))),
                    description=_utf8(str(problem.get("message", ""))),
                )
        status.details.add().Pack(bad_request)
    return OtlpAnswer(error.status, _encode(status, encoding), encoding, dict(error.headers))
