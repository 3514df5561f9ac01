"""Cold start a user feels: a handler's import plus its first request, each in a fresh interpreter.

``bench_import.py`` measures what the issue's goal names (import time against ``/health``'s);
moving work from the import into the first request would meet that goal and help nobody, so this
bench times both, end to end, the way a cold Lambda runs them: python3.12 (Lambda's runtime; any
interpreter with ``--python``) against a Lambda-like package directory (the common layer's
requirements plus boto3, ``pip --target`` into out/bench/lambda-site-<python> on first use), with
Lambda's environment (``LAMBDA_TASK_ROOT``, a sampled ``_X_AMZN_TRACE_ID``: active tracing on),
every AWS call answered by a moto server on 127.0.0.1, and the X-Ray daemon a UDP socket here that
counts the trace documents each cold start sends. Rounds alternate handlers and code versions, so
the machine's load changes hit every column alike.

    .venv/bin/python bench/bench_cold_start.py [--runs 15] [--code OLD_CHECKOUT ...]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HANDLERS = {
    "functions/observer/health.py": "health_get.json",
    "functions/observer/events.py": "events_post_single.json",
    "functions/gateway/sql.py": "sql_post.json",
    "functions/gateway/match.py": "match_post.json",
    "functions/gateway/playbooks.py": "playbooks_get.json",
}
CHILD = """
import importlib.util, json, sys, time
t0 = time.perf_counter()
spec = importlib.util.spec_from_file_location("handler_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
t1 = time.perf_counter()
at_import = [m for m in ("boto3", "botocore.client", "aws_xray_sdk.core") if m in sys.modules]

class Context:
    function_name = "opslake-bench"; function_version = "$LATEST"; memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:opslake-bench"
    aws_request_id = "00000000-0000-0000-0000-000000000000"
    @staticmethod
    def get_remaining_time_in_millis(): return 30_000

response = module.handler(json.load(open(sys.argv[2])), Context())
t2 = time.perf_counter()
print("RESULT " + json.dumps({"import_ms": (t1 - t0) * 1000, "first_ms": (t2 - t1) * 1000,
      "status": response.get("statusCode"), "at_import": at_import}))
"""


class XrayDaemon:
    """A UDP socket standing in for the X-Ray daemon: counts the documents it is sent."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.documents: list[dict[str, Any]] = []
        self._stop = False
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.sock.getsockname()[1]}"

    def _receive(self) -> None:
        while not self._stop:
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            _, _, body = data.decode().partition("\n")
            self.documents.append(json.loads(body))

    def take(self) -> list[dict[str, Any]]:
        taken, self.documents = self.documents, []
        return taken


def lambda_site(python: str) -> Path:
    """The packages a deployed request-path function sees, built for ``python``."""
    version = subprocess.run(
        [python, "-c", "import sys; print('py%d%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    site = ROOT / "out" / "bench" / f"lambda-site-{version}"
    if not (site / "aws_lambda_powertools").exists():
        print(f"installing the common layer's requirements into {site} (once) ...", flush=True)
        subprocess.run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--target",
                str(site),
                "boto3",
                "-r",
                str(ROOT / "layers" / "common" / "requirements.txt"),
            ],
            check=True,
        )
    return site


def provision(endpoint: str) -> None:
    """The queue, the lake bucket and a playbook snapshot the handlers' first requests touch."""
    import boto3

    kwargs: dict[str, Any] = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    boto3.client("sqs", **kwargs).create_queue(QueueName="ops")
    s3 = boto3.client("s3", **kwargs)
    s3.create_bucket(Bucket="lake")
    s3.put_object(
        Bucket="lake",
        Key="playbooks/current.json",
        Body=json.dumps({"generated_at": "2026-11-22T00:00:00Z", "entries": []}).encode(),
    )
    # moto loads a service's backend on its first call (over a second for API Gateway): done here,
    # so that no handler's first request pays for the fake AWS.
    boto3.client("apigateway", **kwargs).get_api_keys()
    boto3.client("athena", **kwargs).list_work_groups()
    boto3.client("glue", **kwargs).get_databases()


def run_once(python: str, site: Path, code: Path, handler: str, env: dict[str, str]) -> dict[str, Any]:
    child_env = {**env, "PYTHONPATH": os.pathsep.join([str(site), str(code / "layers" / "common")])}
    proc = subprocess.run(
        [python, "-s", "-c", CHILD, str(code / handler), str(ROOT / "events" / HANDLERS[handler])],
        capture_output=True,
        text=True,
        env=child_env,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[len("RESULT ") :]))
    raise RuntimeError(f"{handler} in {code} failed:\n{proc.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--python", default=shutil.which("python3.12") or sys.executable)
    parser.add_argument("--code", action="append", type=Path, help="another checkout to time (old code)")
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access line per AWS call otherwise

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    provision(endpoint)
    daemon = XrayDaemon()
    # the interpreter itself, not a pyenv shim (a shell script) in front of it; a shim without a
    # 3.12 selected (make bench sets PYENV_VERSION) fails, and this interpreter is used instead
    probe = subprocess.run(
        [args.python, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        print(f"{args.python} does not run; timing {sys.executable} instead", flush=True)
    args.python = probe.stdout.strip() if probe.returncode == 0 else sys.executable
    site = lambda_site(args.python)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "LAMBDA_TASK_ROOT": str(ROOT),
        "AWS_LAMBDA_FUNCTION_NAME": "opslake-bench",
        "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
        "AWS_XRAY_DAEMON_ADDRESS": daemon.address,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_EC2_METADATA_DISABLED": "true",
        "POWERTOOLS_SERVICE_NAME": "opslake",
        "POWERTOOLS_METRICS_NAMESPACE": "opslake",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        "OPSLAKE_OPS_QUEUE_URL": f"{endpoint}/123456789012/ops",
        "OPSLAKE_LAKE_BUCKET": "lake",
        "OPSLAKE_ATHENA_WORKGROUP": "primary",
    }
    codes = [*(args.code or []), ROOT]
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for _ in range(args.runs):
        for handler in HANDLERS:
            for code in codes:
                result = run_once(args.python, site, code, handler, env)
                result["xray_documents"] = len(daemon.take())
                results.setdefault((str(code), handler), []).append(result)
    server.stop()

    print(f"python: {args.python}; {args.runs} fresh processes per cell; medians in ms")
    print("x/health and x/first code: medians of each round's ratio (paired, so load changes cancel)")
    print(
        f"{'code':24} {'handler':32} {'import':>7} {'x/health':>8} {'1st req':>8} {'total':>7} "
        f"{'x/health':>8} {'x/first code':>12}  status  xray docs  loaded at import"
    )

    def total(r: dict[str, Any]) -> float:
        return float(r["import_ms"] + r["first_ms"])

    for code in codes:
        base = results[(str(code), "functions/observer/health.py")]
        for handler in HANDLERS:
            rows = results[(str(code), handler)]
            first_code = results[(str(codes[0]), handler)]
            label = "new (this checkout)" if code == ROOT else str(code)
            print(
                f"{label:24} {handler:32} {statistics.median(r['import_ms'] for r in rows):7.0f} "
                f"{paired(rows, base, lambda r: r['import_ms']):8.2f} "
                f"{statistics.median(r['first_ms'] for r in rows):8.0f} "
                f"{statistics.median(total(r) for r in rows):7.0f} {paired(rows, base, total):8.2f} "
                f"{paired(rows, first_code, total):12.2f}  {rows[-1]['status']:6}  "
                f"{rows[-1]['xray_documents']:9}  {','.join(rows[-1]['at_import']) or '-'}"
            )


def paired(rows: list[dict[str, Any]], base: list[dict[str, Any]], figure: Any) -> float:
    """The median of each round's ratio ``figure(row) / figure(base row)``."""
    return statistics.median(figure(r) / figure(b) for r, b in zip(rows, base, strict=True))


if __name__ == "__main__":
    main()
