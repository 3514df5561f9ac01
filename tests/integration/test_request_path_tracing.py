"""Request-path handlers import no AWS SDK and no X-Ray SDK, yet their first request is traced.

A handler's import is its cold start's first part; botocore, boto3 and the X-Ray SDK (with its
patching of botocore) are loaded by the first request instead (opslake.observability.tracing).
These tests run a handler the way Lambda does with active tracing on: ``LAMBDA_TASK_ROOT`` and a
sampled ``_X_AMZN_TRACE_ID`` set, tracing not disabled, the X-Ray daemon a UDP socket here. Timing
is measured in bench/bench_import.py and bench/bench_cold_start.py, never asserted here.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACE_ROOT = "1-5759e988-bd862e3fe1be46a994272793"
REQUEST_PATH = sorted(
    [
        ROOT / "functions/observer/events.py",
        ROOT / "functions/observer/traces.py",
        *(ROOT / "functions/gateway").glob("*.py"),
    ],
)
#: Loaded only by the first request (a handler's import must not).
DEFERRED = ("boto3", "botocore.client", "aws_xray_sdk", "aws_xray_sdk.core")

# A Lambda context for the probes below, indented for their `with mock_aws():` blocks.
LAMBDA_CONTEXT = """
    class Context:
        function_name = "opslake-test"; function_version = "$LATEST"; memory_limit_in_mb = 256
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:opslake-test"
        aws_request_id = "00000000-0000-0000-0000-000000000000"
        @staticmethod
        def get_remaining_time_in_millis(): return 30_000
"""

IMPORT_PROBE = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("handler_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(",".join(name for name in sys.argv[2].split(",") if name in sys.modules))
"""

FIRST_REQUEST = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("handler_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
loaded_at_import = [name for name in sys.argv[2].split(",") if name in sys.modules]

from moto import mock_aws
with mock_aws():
    import boto3
    queue_url = boto3.client("sqs").create_queue(QueueName="ops")["QueueUrl"]
    import os
    os.environ["OPSLAKE_OPS_QUEUE_URL"] = queue_url

    LAMBDA_CONTEXT

    response = module.handler(json.load(open(sys.argv[3])), Context())
    queued = boto3.client("sqs").receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
print("RESULT " + json.dumps({"loaded_at_import": loaded_at_import, "status": response["statusCode"],
                              "queued": len(queued)}))
""".replace("\n    LAMBDA_CONTEXT\n", LAMBDA_CONTEXT)


def lambda_env(**extra: str) -> dict[str, str]:
    """The test process's environment as Lambda with active tracing would set it."""
    env = {k: v for k, v in os.environ.items() if k != "POWERTOOLS_TRACE_DISABLED"}
    env.update(
        LAMBDA_TASK_ROOT=str(ROOT),
        AWS_LAMBDA_FUNCTION_NAME="opslake-test",
        OPSLAKE_OPS_QUEUE_URL="https://sqs.us-east-1.amazonaws.com/123456789012/ops",
        OPSLAKE_LAKE_BUCKET="lake",
        PYTHONPATH=os.pathsep.join([str(ROOT / "layers" / "common"), env.get("PYTHONPATH", "")]),
        **extra,
    )
    return env


@pytest.mark.parametrize("handler", REQUEST_PATH, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_importing_a_request_path_handler_loads_no_aws_or_xray_sdk(handler: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE, str(handler), ",".join(DEFERRED)],
        capture_output=True,
        text=True,
        env=lambda_env(),
        check=True,
    )
    assert result.stdout.strip() == "", f"{handler.name} imports {result.stdout.strip()} at import"


def xray_documents(sock: socket.socket) -> list[dict[str, Any]]:
    """Every segment document the X-Ray SDK sent to the daemon address (header line, then JSON)."""
    documents = []
    sock.settimeout(0.5)
    while True:
        try:
            data = sock.recv(65535)
        except TimeoutError:
            return documents
        header, _, body = data.decode().partition("\n")
        assert json.loads(header) == {"format": "json", "version": 1}
        documents.append(json.loads(body))


def run_traced(script: str, *args: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run ``script`` in a fresh process as Lambda with active tracing would (sampled trace header,
    a local UDP socket as the X-Ray daemon): the JSON it printed after ``RESULT`` and the documents
    the X-Ray SDK sent."""
    daemon = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    daemon.bind(("127.0.0.1", 0))
    try:
        env = lambda_env(
            _X_AMZN_TRACE_ID=f"Root={TRACE_ROOT};Parent=53995c3f42cd8ad8;Sampled=1",
            AWS_XRAY_DAEMON_ADDRESS=f"127.0.0.1:{daemon.getsockname()[1]}",
            OPSLAKE_RESOLVE_KEY_NAMES="false",
        )
        proc = subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, check=True
        )
        documents = xray_documents(daemon)
    finally:
        daemon.close()
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    return result, documents


def test_first_events_request_is_traced_with_its_sqs_call() -> None:
    result, documents = run_traced(
        FIRST_REQUEST,
        str(ROOT / "functions/observer/events.py"),
        ",".join(DEFERRED),
        str(ROOT / "events" / "events_post_single.json"),
    )
    assert result == {"loaded_at_import": [], "status": 202, "queued": 1}

    assert {doc["trace_id"] for doc in documents} == {TRACE_ROOT}
    handler = next(doc for doc in documents if doc["name"] == "## handler")  # Powertools, built now
    assert handler["annotations"] == {"ColdStart": True, "Service": "opslake"}
    # the botocore call, patched before the request's first AWS call, inside the handler's subsegment
    calls = [doc for doc in documents if doc["namespace"] == "aws" and doc["parent_id"] == handler["id"]]
    assert [(doc["name"], doc["aws"]["operation"]) for doc in calls] == [("sqs", "SendMessageBatch")]


def test_first_traces_request_is_traced_with_its_sqs_call(tmp_path: Path) -> None:
    """POST /v1/traces as API Gateway hands it over: a gzip protobuf export, base64-encoded."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = bytes(range(1, 17)), bytes(range(1, 9)), "execute_tool query_db"
    span.start_time_unix_nano = time.time_ns() - 60 * 10**9
    span.end_time_unix_nano = span.start_time_unix_nano + 5 * 10**6
    attribute = span.attributes.add()
    attribute.key = gen_ai.GEN_AI_OPERATION_NAME
    attribute.value.string_value = gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
    event = json.loads((ROOT / "events" / "events_post_single.json").read_text())
    headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip", "x-api-key": "k" * 40}
    event.update(
        resource="/v1/traces",
        path="/v1/traces",
        body=base64.b64encode(gzip.compress(request.SerializeToString())).decode(),
        isBase64Encoded=True,
        headers=headers,
        multiValueHeaders={name: [value] for name, value in headers.items()},
    )
    event["requestContext"].update(resourcePath="/v1/traces", path="/v1/traces")
    event_file = tmp_path / "traces_post.json"
    event_file.write_text(json.dumps(event))

    result, documents = run_traced(
        FIRST_REQUEST, str(ROOT / "functions/observer/traces.py"), ",".join(DEFERRED), str(event_file)
    )
    assert result == {"loaded_at_import": [], "status": 200, "queued": 1}
    handler = next(doc for doc in documents if doc["name"] == "## handler")
    calls = [doc for doc in documents if doc["namespace"] == "aws" and doc["parent_id"] == handler["id"]]
    assert [(doc["name"], doc["aws"]["operation"]) for doc in calls] == [("sqs", "SendMessageBatch")]


def test_the_tracer_patches_the_libraries_opslake_calls_out_with_and_nothing_else() -> None:
    """botocore (every AWS call), http.client (GET /model's urllib probe) and httpx where installed
    (the analyzer's LLM calls, data layer); not patch_all's other libraries, which it would import (sqlite3) or probe."""
    probe = (
        "import sys\n"
        "from opslake.observability.tracing import get_tracer\n"
        "get_tracer()\n"
        "from aws_xray_sdk.core import patcher\n"
        "print(','.join(sorted(patcher._PATCHED_MODULES)), 'sqlite3' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=lambda_env(), check=True
    )
    assert result.stdout.split() == ["botocore,httplib,httpx", "False"]


MODEL_REQUEST = """
import http.server, importlib.util, json, os, sys, threading

class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(401)  # an LLM endpoint without a key: up
        self.end_headers()
    def log_message(self, *args): pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Models)
threading.Thread(target=server.serve_forever, daemon=True).start()
os.environ["OPSLAKE_LLM_BASE_URL"] = f"http://127.0.0.1:{server.server_address[1]}/v1"
os.environ["OPSLAKE_LLM_MODEL"] = "a-model"
spec = importlib.util.spec_from_file_location("handler_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)

from moto import mock_aws
with mock_aws():
    import boto3
    boto3.client("s3").create_bucket(Bucket="lake")

    LAMBDA_CONTEXT

    response = module.handler(json.load(open(sys.argv[2])), Context())
print("RESULT " + json.dumps({"status": response["statusCode"], "reachable": json.loads(response["body"])["reachable"]}))
""".replace("\n    LAMBDA_CONTEXT\n", LAMBDA_CONTEXT)


def test_get_model_probe_of_the_llm_endpoint_is_a_subsegment() -> None:
    """GET /model's probe goes through urllib (http.client): with ``httplib`` patched it is a
    ``remote`` subsegment of the handler's, as it was under patch_all."""
    result, documents = run_traced(
        MODEL_REQUEST, str(ROOT / "functions/gateway/model.py"), str(ROOT / "events" / "model_get.json")
    )
    assert (result["status"], result["reachable"]) == (200, True)

    handler = next(doc for doc in documents if doc["name"] == "## handler")
    probes = [
        doc for doc in documents if doc.get("namespace") == "remote" and doc["parent_id"] == handler["id"]
    ]
    # the X-Ray SDK records the request's send and its response as two subsegments
    assert {(doc["name"], doc["http"]["request"]["url"]) for doc in probes} == {
        ("127.0.0.1", "http://127.0.0.1/v1/models")
    }
    assert [doc["http"]["response"]["status"] for doc in probes if "response" in doc["http"]] == [401]
