"""Record what real agent frameworks export: ``make record-frameworks`` (or ``python
tests/data/frameworks/record.py [framework …]``).

For each framework: a venv of its own (``.venv-frameworks/<venv>``, gitignored; kept between runs),
the framework installed from PyPI, and a tiny agent (``agents/<framework>.py``) with one tool that
succeeds and one that raises, asked one question against the fake OpenAI-compatible server of the
tests (``tests/fake_llm.py``), scripted to call both tools and then answer. The spans go through the
framework's own instrumentation and the OTLP/HTTP protobuf exporter to a collector stub here, which
keeps the raw request bodies: ``<framework>.pb`` is their concatenation, itself one valid
``ExportTraceServiceRequest`` (protobuf merges repeated fields of concatenated messages). The
versions installed go to ``versions.json``. CI never runs this: the fixtures are committed and
replayed by ``tests/unit/otlp/test_framework_fixtures.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from fake_llm import FakeLlm  # noqa: E402

EXPORTER = "opentelemetry-exporter-otlp-proto-http"
GENAI_LATEST = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}


@dataclass(frozen=True)
class Framework:
    venv: str  # variants of one framework share a venv
    agent: str  # agents/<agent>_agent.py (not <framework>.py: that would shadow the package)
    packages: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


FRAMEWORKS: dict[str, Framework] = {
    "langgraph": Framework(
        "langgraph",
        "langgraph",
        ("langgraph", "langchain-openai", "openinference-instrumentation-langchain", EXPORTER),
    ),
    # Strands' default: message content in span events (gen_ai.user.message, gen_ai.choice, …)
    "strands": Framework("strands", "strands", ("strands-agents[openai]", EXPORTER)),
    # the latest GenAI conventions: gen_ai.client.inference.operation.details events
    "strands-latest": Framework("strands", "strands", ("strands-agents[openai]", EXPORTER), GENAI_LATEST),
    "openai-agents": Framework(
        "openai-agents",
        "openai_agents",
        ("openai-agents", "openinference-instrumentation-openai-agents", EXPORTER),
    ),
    "openinference-openai": Framework(
        "oi-openai", "openinference_openai", ("openai", "openinference-instrumentation-openai", EXPORTER)
    ),
    # content only with the latest conventions and a capture mode ("true" is refused: NO_CONTENT)
    "openai-v2": Framework(
        "openai-v2",
        "openai_v2",
        # it imports httpx (openai 3 no longer brings it) and util.genai.instruments (gone in util-genai 1.2b0)
        (
            "openai",
            "opentelemetry-instrumentation-openai-v2",
            "httpx",
            "opentelemetry-util-genai<1.2",
            EXPORTER,
        ),
        {**GENAI_LATEST, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only"},
    ),
    # the default conventions (v1.30): "true" is accepted, but the content goes to log events, not spans
    "openai-v2-legacy": Framework(
        "openai-v2",
        "openai_v2",
        (
            "openai",
            "opentelemetry-instrumentation-openai-v2",
            "httpx",
            "opentelemetry-util-genai<1.2",
            EXPORTER,
        ),
        {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"},
    ),
    # the opt-in with "true": not a capture mode of the latest conventions (no content)
    "openai-v2-true": Framework(
        "openai-v2",
        "openai_v2",
        (
            "openai",
            "opentelemetry-instrumentation-openai-v2",
            "httpx",
            "opentelemetry-util-genai<1.2",
            EXPORTER,
        ),
        {**GENAI_LATEST, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"},
    ),
    "pydantic-ai": Framework("pydantic-ai", "pydantic_ai", ("pydantic-ai-slim[openai]", EXPORTER)),
}
#: The packages whose versions a recording names.
REPORTED = (
    "langgraph", "langchain-core", "langchain-openai", "openinference-instrumentation-langchain",
    "openinference-instrumentation-openai", "openinference-instrumentation-openai-agents", "openai-agents",
    "opentelemetry-instrumentation-openai-v2", "opentelemetry-util-genai", "pydantic-ai-slim", "strands-agents", "openai",
    "opentelemetry-sdk", EXPORTER,
)  # fmt: skip


def script() -> tuple[Any, ...]:
    """What the fake model answers: call both tools at once, then answer in words."""
    return (
        FakeLlm.tool_calls(
            ("call_lookup_1", "lookup_order", {"order_id": "A1"}),
            ("call_cancel_1", "cancel_order", {"order_id": "A1"}),
        ),
        FakeLlm.answer(
            "Order A1 shipped on 2026-11-20 and arrives 2026-11-30; it can no longer be cancelled."
        ),
    )


class Collector:
    """An OTLP/HTTP endpoint that keeps every request body as it came."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Type", "").startswith("application/x-protobuf"):
                    collector.bodies.append(body)
                    self.send_response(200)
                else:
                    self.send_response(415)  # only the protobuf encoding is recorded
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"


def venv_python(venvs: Path, framework: Framework, reinstall: bool) -> Path:
    venv = venvs / framework.venv
    python = venv / "bin" / "python"
    if reinstall or not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *framework.packages], check=True)
    return python


def versions(python: Path) -> dict[str, str]:
    code = (
        "import json, importlib.metadata as m, sys\n"
        "found = {}\n"
        "for name in sys.argv[1:]:\n"
        "    try: found[name] = m.version(name)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(found))"
    )
    out = subprocess.run([str(python), "-c", code, *REPORTED], check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout))


def record(name: str, venvs: Path, reinstall: bool) -> dict[str, str]:
    framework = FRAMEWORKS[name]
    python = venv_python(venvs, framework, reinstall)
    collector = Collector()
    with FakeLlm() as llm:
        llm.script(*script())
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "sk-fake-key-for-recording",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            **framework.env,
        }
        subprocess.run(
            [str(python), str(HERE / "agents" / f"{framework.agent}_agent.py")], env=env, check=True
        )
    collector.server.shutdown()
    if not collector.bodies:
        raise SystemExit(f"{name}: no spans were exported")
    (HERE / f"{name}.pb").write_bytes(b"".join(collector.bodies))
    print(f"{name}: {len(collector.bodies)} export requests recorded")
    return {**versions(python), **{f"env:{k}": v for k, v in framework.env.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("frameworks", nargs="*", help=f"some of {', '.join(FRAMEWORKS)} (default: all)")
    parser.add_argument(
        "--venvs", type=Path, default=Path(os.environ.get("FRAMEWORK_VENVS", ROOT / ".venv-frameworks"))
    )
    parser.add_argument("--reinstall", action="store_true", help="rebuild the venvs with today's releases")
    args = parser.parse_args()
    unknown = [name for name in args.frameworks if name not in FRAMEWORKS]
    if unknown:
        parser.error(f"unknown framework(s) {', '.join(unknown)}; choose from {', '.join(FRAMEWORKS)}")
    manifest = HERE / "versions.json"
    recorded = json.loads(manifest.read_text()) if manifest.exists() else {}
    for name in (
        args.frameworks or FRAMEWORKS
    ):  # the manifest after each: a framework that fails keeps the others
        recorded[name] = record(name, args.venvs, args.reinstall)
        manifest.write_text(json.dumps(dict(sorted(recorded.items())), indent=2) + "\n")


if __name__ == "__main__":
    main()
