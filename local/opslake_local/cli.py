"""The ``opslake`` command line: ``local up``, ``demo`` and ``invoke``.

``opslake local up`` runs the stack, the local API and a background drainer until Ctrl-C and
records where they are in ``.opslake/local.json``; ``opslake invoke`` uses that running stack
when there is one and an ephemeral stack otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

STATE_FILE = Path(".opslake/local.json")


def _state_path(template: Path) -> Path:
    """The state file lives next to template.yaml (the repository root)."""
    return template.parent / STATE_FILE


def _moto_alive(endpoint: str) -> bool:
    """Whether a moto server answers at ``endpoint``."""
    try:
        with urllib.request.urlopen(f"{endpoint}/moto-api/data.json", timeout=1):
            return True
    except OSError:
        return False


def running_stack(template: Path) -> dict[str, Any] | None:
    """The state of a stack started by ``opslake local up`` that is still answering, if any."""
    path = _state_path(template)
    if not path.is_file():
        return None
    state: dict[str, Any] = json.loads(path.read_text())
    return state if _moto_alive(state.get("moto_endpoint", "")) else None


# ---- commands -----------------------------------------------------------------------------------
def cmd_local_up(args: argparse.Namespace) -> int:
    """Run stack + API + drainer in the foreground until Ctrl-C."""
    from opslake_local.drain import BackgroundDrainer, Drainer, DrainResult
    from opslake_local.http import LocalApi
    from opslake_local.stack import LocalStack
    from opslake_local.template import find_template

    template = find_template(args.template)
    with LocalStack(template, port=args.moto_port) as stack:
        invoker = stack.invoker()
        api = LocalApi(stack, invoker, access_log=True)
        base_url = api.start(args.port)

        def report(result: DrainResult) -> None:
            print(
                f"writer: {result.received} messages, {result.written} done, {result.failed} to retry",
                flush=True,
            )

        drainer = BackgroundDrainer(Drainer(stack, invoker), interval_s=args.poll, on_batch=report).start()
        state_path = _state_path(stack.template.path)
        state = {"api_url": base_url, **stack.describe(), "pid": os.getpid()}
        state_path.parent.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps(state, indent=2) + "\n")
        print(f"opslake local stack is up ({stack.template.path})")
        print(f"  API          {base_url}   (routes: "
              + ", ".join(f"{r.method} {r.path}" for r in stack.template.api_routes()) + ")")  # fmt: skip
        print(f"  API key      {stack.api_key.value if stack.api_key else '-'}   (name {stack.key_name})")
        print(f"  moto         {stack.endpoint}   (AWS_ENDPOINT_URL for boto3 / aws CLI)")
        print(f"  bucket       {stack.bucket}")
        print(f"  state file   {state_path}")
        print("Ctrl-C to stop.", flush=True)
        stopped = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):  # explicit: SIGINT may be ignored when backgrounded
            signal.signal(signum, lambda *_: stopped.set())
        try:
            while not stopped.wait(0.5):
                pass
        finally:
            print("\nstopping...", flush=True)
            state_path.unlink(missing_ok=True)
            if not any(state_path.parent.iterdir()):
                state_path.parent.rmdir()
            drainer.stop()
            api.stop()
    print("stopped.")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the end-to-end demo."""
    from opslake_local.demo import run

    run(Path(args.out))
    return 0


def cmd_invoke(args: argparse.Namespace) -> int:
    """Invoke one function with an event file, against the running stack or an ephemeral one."""
    from opslake_local.invoke import FunctionError, Invoker
    from opslake_local.stack import LocalStack
    from opslake_local.template import Template, find_template

    template_path = find_template(args.template)
    event = json.loads(Path(args.event).read_text())
    state = running_stack(template_path)
    try:
        if state is not None:
            os.environ.update(state["environment"])
            os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
            print(f"(using the running local stack at {state['moto_endpoint']})", file=sys.stderr)
            template = Template(template_path)
            for logical_id, url in state["queues"].items():
                template.set_queue_url(logical_id, url)
            result = Invoker(template).invoke(args.function, event)
        else:
            print("(no local stack running: starting an ephemeral one)", file=sys.stderr)
            with LocalStack(template_path) as stack:
                result = stack.invoker().invoke(args.function, event)
    except FunctionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


# ---- parser -------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opslake", description="opslake local tools (no Docker needed)")
    parser.add_argument(
        "--template", type=Path, default=None, help="template.yaml, or a directory to look for it in"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    local = commands.add_parser("local", help="the local stack").add_subparsers(
        dest="local_command", required=True
    )
    up = local.add_parser("up", help="run moto, the local API and the queue drainer until Ctrl-C")
    up.add_argument("--port", type=int, default=3700, help="local API port (default 3700)")
    up.add_argument("--moto-port", type=int, default=None, help="moto server port (default: a free one)")
    up.add_argument("--poll", type=float, default=1.0, help="seconds between queue polls when idle")
    up.set_defaults(func=cmd_local_up)

    demo = commands.add_parser("demo", help="end-to-end demo: HTTP ingest -> queue -> Parquet lake")
    demo.add_argument("--out", default="out/demo/lake", help="where to copy the demo lake")
    demo.set_defaults(func=cmd_demo)

    invoke = commands.add_parser("invoke", help="invoke a function (template logical id) with an event")
    invoke.add_argument("function", help="logical id, e.g. EventsFunction")
    invoke.add_argument("--event", required=True, help="JSON event file, e.g. events/health_get.json")
    invoke.set_defaults(func=cmd_invoke)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``opslake`` console script."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
