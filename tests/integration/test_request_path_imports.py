"""The request path stays light: no gateway or ingest handler imports pyarrow (or the local stack).

Timing is measured in bench/bench_import.py, never asserted here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUEST_PATH = sorted(
    [
        ROOT / "functions/observer/events.py",
        ROOT / "functions/observer/health.py",
        ROOT / "functions/observer/traces.py",
        *(ROOT / "functions/gateway").glob("*.py"),
    ]
)
PROBE = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("handler_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
# the analysis package's correction counters and playbook logic (~100 ms) belong to the jobs: /ask needs its reporters only
heavy = (
    "pyarrow", "duckdb", "sqlglot", "moto", "opslake_local", "opslake.analysis.corrections",
    "opslake.analysis.playbooks",
)
print(",".join(sorted(name for name in heavy if name in sys.modules)))
"""


@pytest.mark.parametrize("handler", REQUEST_PATH, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_request_path_handler_imports_nothing_heavy(handler: Path) -> None:
    env = {
        **os.environ,
        "OPSLAKE_OPS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/ops",
        "OPSLAKE_LAKE_BUCKET": "lake",
    }
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(handler)], capture_output=True, text=True, env=env, check=True
    )
    assert result.stdout.strip() == "", f"{handler.name} imports {result.stdout.strip()}"


#: POST /mcp's messages that reach no tool: they must not pay for any tool's engine or guard.
MCP_PROBE = """
import importlib.util, json, sys
from types import SimpleNamespace
spec = importlib.util.spec_from_file_location("handler_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
event = json.load(open(sys.argv[2]))
event["headers"] = {k: v for k, v in event["headers"].items() if k.lower() != "mcp-protocol-version"}
context = SimpleNamespace(function_name="mcp", memory_limit_in_mb=512, aws_request_id="r",
                          invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:mcp")
statuses = []
for message in (
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
     "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
):
    answer = module.handler({**event, "body": json.dumps(message)}, context)
    statuses.append(str(answer["statusCode"]) + ("" if '"result"' in answer["body"] else " no result"))
heavy = ("pyarrow", "duckdb", "sqlglot", "moto", "opslake_local", "httpx", "opslake.analysis", "opslake.llm")
print("MCP_PROBE " + ";".join(statuses) + "|" + ",".join(sorted(n for n in heavy if n in sys.modules)))
"""


def test_mcp_initialize_and_tools_list_import_no_tools_engine_guard_or_model_client() -> None:
    """tools/list builds every tool's schema from its pydantic model (opslake.models.tools, the
    tools' model modules): importing those must not pull in a handler's engine, the SQL guard
    (sqlglot), /ask's prompts and grounding check (opslake.analysis) or its model client."""
    env = {
        **os.environ,
        "OPSLAKE_OPS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/ops",
        "OPSLAKE_LAKE_BUCKET": "lake",
        "POWERTOOLS_TRACE_DISABLED": "1",
        "POWERTOOLS_METRICS_DISABLED": "1",
        "POWERTOOLS_LOG_LEVEL": "ERROR",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            MCP_PROBE,
            str(ROOT / "functions/gateway/mcp_http.py"),
            str(ROOT / "events/mcp_post.json"),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("MCP_PROBE ")]
    assert line == "MCP_PROBE 200;200|", line


#: What POST /ask's first question imports after its handler (opslake.tools.ask imports the prompts and
#: the check on first use, functions/gateway/ask.py the guard and its LLM client), with Lambda's engine.
ASK_FIRST_QUESTION_PROBE = """
import sys
import opslake.tools.sql, opslake.tools.ask_prompts, opslake.tools.grounding, opslake.tools.ask_model
import opslake.llm, opslake.llm.keys, opslake.llm.records, httpx
from opslake.tools.app import query_engine
heavy = sorted(name for name in ("pyarrow", "duckdb", "moto", "opslake_local") if name in sys.modules)
print("ASK_PROBE " + type(query_engine()).__name__ + "|" + ",".join(heavy))
"""


def test_asks_first_question_imports_no_pyarrow_with_lambdas_engine() -> None:
    env = {
        **os.environ,
        "OPSLAKE_OPS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/ops",
        "OPSLAKE_LAKE_BUCKET": "lake",
        "OPSLAKE_QUERY_ENGINE": "athena",
        "OPSLAKE_ATHENA_WORKGROUP": "opslake",
        "AWS_DEFAULT_REGION": "us-east-1",
        "PYTHONPATH": str(ROOT / "layers/common"),
    }
    result = subprocess.run(
        [sys.executable, "-c", ASK_FIRST_QUESTION_PROBE], capture_output=True, text=True, env=env, check=True
    )
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("ASK_PROBE ")]
    assert line == "ASK_PROBE AthenaEngine|", line
