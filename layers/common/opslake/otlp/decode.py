"""Read an OTLP/HTTP trace export: content type, content encoding, then protobuf or OTLP/JSON.

Both encodings become the same ``ExportTraceServiceRequest`` (the maintained message classes of
``opentelemetry-proto``). Every bound applies to the decompressed bytes, and decompression stops
as soon as a bound is crossed, so a small gzip body that inflates to gigabytes costs a few
megabytes of memory, never more (a gzip "bomb" is a 413 that says what happened).

OTLP/JSON is the protobuf JSON mapping with one exception the spec makes: trace and span ids are
hex strings, not base64. They are rewritten to base64 before the protobuf parser sees them.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from dataclasses import dataclass
from typing import Any, Literal

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from opslake.errors import (
    BadRequestError,
    JsonTooDeepError,
    MalformedJsonError,
    PayloadTooLargeError,
    UndecodableBodyError,
    UnsupportedMediaTypeError,
)
from opslake.http.bodies import check_json_depth

Encoding = Literal["protobuf", "json"]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
#: Largest export opslake reads, after decompression. On AWS the tighter bound is Lambda's 6 MB request
#: (API Gateway inflates a gzip body before the function, and a protobuf body arrives base64-encoded:
#: ≈ 4.4 MB of it); this one holds wherever the function gets a body still compressed (the local stack).
MAX_DECOMPRESSED_BYTES = 8 * 1024 * 1024
#: A body that inflates more than this is refused before it reaches the limit above: real span
#: batches compress 5-20×, a bomb by a thousand or more.
MAX_COMPRESSION_RATIO = 200
#: Spans in one export (the SDKs' BatchSpanProcessor sends at most 512 by default, the Collector's
#: batch processor 8,192).
MAX_SPANS_PER_REQUEST = 10_000
_GZIP_MAGIC = b"\x1f\x8b"
_INFLATE_STEP = 1024 * 1024  # bytes inflated at a time
# Fields of OTLP/JSON that hold ids as hex, and the byte length each must have.
_ID_FIELDS = {
    "traceId": 16,
    "trace_id": 16,
    "spanId": 8,
    "span_id": 8,
    "parentSpanId": 8,
    "parent_span_id": 8,
}


class OtlpBadRequestError(BadRequestError):
    """The export is not a well-formed OTLP request (bad protobuf, JSON or hex id)."""

    code = "invalid_otlp"


@dataclass(frozen=True)
class Export:
    """A decoded export and the encoding its answer must use."""

    request: ExportTraceServiceRequest
    encoding: Encoding
    body_bytes: int  # after decompression

    @property
    def span_count(self) -> int:
        return sum(len(scope.spans) for rs in self.request.resource_spans for scope in rs.scope_spans)


def encoding_of(content_type: str | None) -> Encoding:
    """The encoding a Content-Type names; 415 for anything OTLP/HTTP does not define."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == PROTOBUF:
        return "protobuf"
    if media == JSON:
        return "json"
    shown = media[:80] or "(none)"
    raise UnsupportedMediaTypeError(
        f"Content-Type {shown!r} is not an OTLP/HTTP encoding: send {PROTOBUF} or {JSON}",
        detail={"header": "Content-Type", "accepted": [PROTOBUF, JSON]},
    )


def inflate(body: bytes, content_encoding: str | None) -> bytes:
    """The body with its Content-Encoding undone (gzip, deflate or none), within the bounds.

    API Gateway REST APIs decompress a gzip request before the function runs but keep the header, so a
    body sent compressed may arrive already inflated: its first bytes decide (neither a protobuf
    message nor JSON can start with the gzip magic or a zlib header).
    """
    encoding = (content_encoding or "").strip().lower()
    if encoding in ("", "identity"):
        compressed = False
    elif encoding in ("gzip", "x-gzip"):
        compressed = body[:2] == _GZIP_MAGIC
    elif encoding == "deflate":  # RFC 9110: the zlib format (what the Python exporter sends)
        compressed = len(body) >= 2 and body[0] & 0x0F == 8 and (body[0] << 8 | body[1]) % 31 == 0
    else:
        raise UnsupportedMediaTypeError(
            f"Content-Encoding {encoding[:40]!r} is not accepted: send gzip, deflate or no encoding",
            detail={"header": "Content-Encoding", "accepted": ["gzip", "deflate", "identity"]},
        )
    if not compressed:
        _check_size(len(body))
        return body
    return _inflate(body, gzip=encoding != "deflate")


def _check_size(size: int) -> None:
    if size > MAX_DECOMPRESSED_BYTES:
        raise PayloadTooLargeError(
            f"the export is {size} bytes; the limit is {MAX_DECOMPRESSED_BYTES} "
            "(lower the exporter's max_export_batch_size)",
            detail={"limit_bytes": MAX_DECOMPRESSED_BYTES},
        )


def _inflate(body: bytes, *, gzip: bool) -> bytes:
    """Inflate a step at a time, so that no more than the limit (and one step) is ever in memory;
    past the first step, a body inflating more than the ratio bound is a bomb. A gzip body may hold
    several members (RFC 1952), read one after the other; anything else after the end is refused."""
    name = "gzip" if gzip else "deflate"
    wbits = 16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS
    inflater = zlib.decompressobj(wbits=wbits)
    out = bytearray()
    pending = body
    try:
        while pending:
            out += inflater.decompress(pending, _INFLATE_STEP)
            pending = inflater.unconsumed_tail
            consumed = len(body) - len(pending) - len(inflater.unused_data)
            if len(out) > _INFLATE_STEP and len(out) > consumed * MAX_COMPRESSION_RATIO:
                raise PayloadTooLargeError(
                    f"the {name} body inflates more than {MAX_COMPRESSION_RATIO}× ({consumed} bytes became "
                    f"{len(out)} and counting): refused as a decompression bomb",
                    detail={"max_ratio": MAX_COMPRESSION_RATIO},
                )
            _check_size(len(out))
            if inflater.eof:
                pending = inflater.unused_data
                if pending and not (gzip and pending[:2] == _GZIP_MAGIC):
                    raise UndecodableBodyError(
                        f"{len(pending)} bytes follow the end of the {name} stream; send one {name} body"
                    )
                if pending:  # the next gzip member
                    inflater = zlib.decompressobj(wbits=wbits)
    except zlib.error as exc:
        raise UndecodableBodyError(f"the body is marked {name} but is not valid {name} ({exc})") from None
    if not inflater.eof:
        raise UndecodableBodyError(f"the {name} body is truncated (no end of stream)")
    return bytes(out)


def decode_export(body: bytes, *, content_type: str | None, content_encoding: str | None) -> Export:
    """Content type, then decompression, then parsing: each failure a 4xx that says what was wrong."""
    encoding = encoding_of(content_type)
    raw = inflate(body, content_encoding)
    if not raw and encoding == "json":  # (zero bytes is the empty protobuf message: a success)
        raise OtlpBadRequestError("the export is empty; send an ExportTraceServiceRequest")
    request = _parse_protobuf(raw) if encoding == "protobuf" else _parse_json(raw)
    export = Export(request, encoding, len(raw))
    if export.span_count > MAX_SPANS_PER_REQUEST:
        raise PayloadTooLargeError(
            f"{export.span_count} spans in one export; the limit is {MAX_SPANS_PER_REQUEST} "
            "(lower the exporter's max_export_batch_size)",
            detail={"limit_spans": MAX_SPANS_PER_REQUEST},
        )
    return export


def _parse_protobuf(raw: bytes) -> ExportTraceServiceRequest:
    try:
        return ExportTraceServiceRequest.FromString(raw)
    except (DecodeError, RuntimeWarning, ValueError) as exc:
        raise OtlpBadRequestError(
            f"the body is not a valid protobuf ExportTraceServiceRequest ({exc}); "
            "is it truncated or JSON sent as application/x-protobuf?"
        ) from None


def _parse_json(raw: bytes) -> ExportTraceServiceRequest:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UndecodableBodyError(f"the JSON export is not valid UTF-8 (byte {exc.start})") from None
    check_json_depth(text)
    try:
        document = json.loads(text)
    except RecursionError:
        raise JsonTooDeepError("the JSON body nests too deeply; flatten it") from None
    except ValueError as exc:
        raise MalformedJsonError(f"the export is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise OtlpBadRequestError(f"an OTLP/JSON export is an object, not a JSON {type(document).__name__}")
    try:  # JSON escapes can spell lone surrogates, which no protobuf string may hold
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise UndecodableBodyError(
            "the JSON export holds a lone surrogate (\\ud800-\\udfff): not UTF-8 text"
        ) from None
    _hex_ids_to_base64(document)
    from google.protobuf import json_format  # JSON exports only: ~19 ms of every cold start otherwise

    try:
        return json_format.ParseDict(document, ExportTraceServiceRequest(), ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise OtlpBadRequestError(f"the JSON export does not follow OTLP/JSON: {exc}") from None
    except (OverflowError, ValueError, TypeError, SystemError) as exc:
        # e.g. an enum of 1e400 (read as inf): the parser fails outside its own error type
        raise OtlpBadRequestError(
            f"the JSON export does not follow OTLP/JSON: {type(exc).__name__}: {str(exc)[:200]}"
        ) from None


def _hex_ids_to_base64(document: dict[str, Any]) -> None:
    """Rewrite the hex trace/span ids of spans and their links to the base64 protobuf JSON expects."""
    for resource_spans in _items(document, "resourceSpans", "resource_spans"):
        for scope_spans in _items(resource_spans, "scopeSpans", "scope_spans"):
            for position, span in enumerate(_items(scope_spans, "spans", "spans")):
                _rewrite_ids(span, f"span {position}")
                for link in _items(span, "links", "links"):
                    _rewrite_ids(link, f"a link of span {position}")


def _items(parent: Any, camel: str, snake: str) -> list[Any]:
    if not isinstance(parent, dict):
        return []
    value = parent.get(camel, parent.get(snake))
    return value if isinstance(value, list) else []


def _rewrite_ids(node: Any, where: str) -> None:
    if not isinstance(node, dict):
        return
    for name in _ID_FIELDS:
        value = node.get(name)
        if not isinstance(value, str):
            continue  # absent, or a type the protobuf parser will name
        try:
            node[name] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
        except (ValueError, binascii.Error):
            raise OtlpBadRequestError(
                f"{where}: {name} {value[:40]!r} is not hex (OTLP/JSON sends trace and span ids as hex)"
            ) from None
