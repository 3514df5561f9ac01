"""Commands that run the local stack or its functions: ``local up``, ``demo``, ``invoke`` and
``schedule run``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opslake_local.cli.target import (
    CliError,
    Commands,
    data_path,
    require_stack,
    running_stack,
    stack_environment,
    state_path,
)


def llm_parameters() -> tuple[dict[str, str], str | None]:
    """The stack parameters of the model the shell names (see :func:`opslake_local.demo.llm_parameters`)."""
    from opslake_local.demo import llm_parameters as from_environment

    return from_environment()


if TYPE_CHECKING:
    from opslake_local.stack import LocalStack


# ---- local up -----------------------------------------------------------------------------------
def cmd_local_up(args: argparse.Namespace) -> int:
    """Run stack + API + drainer in the foreground until Ctrl-C; the lake, queues and keys are
    restored from the data directory and kept there (unless ``--ephemeral``)."""
    from opslake_local.containers import ContainerPool
    from opslake_local.drain import BackgroundDrainer, Drainer, DrainResult
    from opslake_local.http import LocalApi
    from opslake_local.schedule import Run, Scheduler
    from opslake_local.stack import LocalStack
    from opslake_local.template import find_template

    template = find_template(args.template)
    data_dir = None if args.ephemeral else data_path(template, args.data_dir)
    if data_dir is None:
        print(EPHEMERAL_WARNING, file=sys.stderr, flush=True)
    # A model named in the shell (OPSLAKE_LLM_BASE_URL/MODEL) reaches the analyzer and POST /ask,
    # as in opslake demo; else the template's empty defaults would override it.
    parameters, _ = llm_parameters()
    with _started(
        LocalStack(template, port=args.moto_port, data_dir=data_dir, parameters=parameters)
    ) as stack:
        invoker = stack.invoker()
        pool = ContainerPool(stack, args.containers) if args.containers > 0 else None
        api = LocalApi(stack, pool or invoker, access_log=True)
        base_url = api.start(args.port)

        def report(result: DrainResult) -> None:
            print(
                f"writer: {result.received} messages, {result.written} done, {result.failed} to retry",
                flush=True,
            )

        def scheduled(run: Run) -> None:
            outcome = f"failed: {run.error}" if run.error else "ok"
            print(f"schedule: {run.schedule.function} ({run.schedule.expression.text}) {outcome}", flush=True)

        drainer = BackgroundDrainer(Drainer(stack, invoker), interval_s=args.poll, on_batch=report).start()
        scheduler = Scheduler(stack.template, invoker.invoke, on_run=scheduled).start()
        path = state_path(stack.template.path, args.state)
        state = {"api_url": base_url, **stack.describe(), "pid": os.getpid()}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(state, indent=2) + "\n")
        print(f"opslake local stack is up ({stack.template.path})")
        print(f"  API          {base_url}   (routes: "
              + ", ".join(f"{r.method} {r.path}" for r in stack.template.api_routes()) + ")")  # fmt: skip
        print(f"  API key      {stack.api_key.value if stack.api_key else '-'}   (name {stack.key_name})")
        print(f"  functions    API routes in {f'{args.containers} processes' if pool else 'this process'}; "
              "the writer and schedules in this process")  # fmt: skip
        print(f"  moto         {stack.endpoint}   (AWS_ENDPOINT_URL for boto3 / aws CLI)")
        print(f"  bucket       {stack.bucket}")
        print(f"  data         {describe_data(stack)}")
        jobs = (
            ", ".join(f"{s.function} {s.expression.text}" for s in scheduler.schedules)
            or "none in the template"
        )
        print(f"  schedules    {jobs}")
        print(f"  state file   {path}")
        stopped = threading.Event()
        # Before saying how to stop: a Ctrl-C right after the message must stop cleanly (checkpoint).
        for signum in (signal.SIGINT, signal.SIGTERM):  # explicit: SIGINT may be ignored when backgrounded
            signal.signal(signum, lambda *_: stopped.set())
        # the warning was printed once at start; the banner's "data" line says it again
        print("Ctrl-C to stop.", flush=True)
        try:
            while not stopped.wait(0.5):
                pass
        finally:
            print("\nstopping...", flush=True)
            path.unlink(missing_ok=True)
            if args.state is None and not any(path.parent.iterdir()):  # only our own .opslake/
                path.parent.rmdir()
            scheduler.stop()
            drainer.stop()
            api.stop()
            if pool is not None:
                pool.close()
    print("stopped.")
    return 0


@contextmanager
def _started(stack: LocalStack) -> Iterator[LocalStack]:
    """The stack started (a data directory it cannot use is a usage error), stopped on the way out."""
    from opslake_local.persist import PersistenceError

    try:
        stack.start()
    except PersistenceError as exc:
        raise CliError(str(exc), 2) from exc
    try:
        yield stack
    finally:
        stack.stop()


EPHEMERAL_WARNING = (
    "WARNING: --ephemeral: the lake, the queues and the API keys live only in this process's "
    "memory; stopping the stack loses all of them."
)


def describe_data(stack: LocalStack) -> str:
    """Where the stack keeps its data, and what its start restored from there."""
    if stack.data_dir is None:
        return "in memory only (--ephemeral): a stop loses the lake, queues and keys"
    restored = stack.restored
    if restored is None or restored.saved_at is None:
        return f"{stack.data_dir}   (new: kept across restarts; checkpointed every {stack.checkpoint_s:g} s and on stop)"
    return (
        f"{stack.data_dir}   (restored {restored.objects} objects, {restored.partitions} partitions, "
        f"{restored.messages} queued messages and {len(restored.keys)} keys saved {restored.saved_at})"
    )


def add_local(commands: Commands) -> None:
    local = commands.add_parser("local", help="the local stack").add_subparsers(
        dest="local_command", required=True
    )
    up = local.add_parser("up", help="run moto, the local API and the queue drainer until Ctrl-C")
    up.add_argument("--port", type=int, default=3700, help="local API port (default 3700)")
    up.add_argument("--moto-port", type=int, default=None, help="moto server port (default: a free one)")
    up.add_argument("--poll", type=float, default=1.0, help="seconds between queue polls when idle")
    up.add_argument(
        "--containers",
        type=int,
        default=2,
        help="processes the API's functions run in, as Lambda scales out (default 2; 0: all in this "
        "process, one request at a time per function)",
    )
    up.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the lake, queues and API keys are kept between runs (default .opslake/data next "
        "to template.yaml)",
    )
    up.add_argument(
        "--ephemeral", action="store_true", help="keep nothing: a stop loses the lake, queues and keys"
    )
    up.set_defaults(func=cmd_local_up)


# ---- demo ---------------------------------------------------------------------------------------
def cmd_demo(args: argparse.Namespace) -> int:
    """Run the end-to-end demo."""
    from opslake_local.demo import run

    run(Path(args.out))
    return 0


def add_demo(commands: Commands) -> None:
    demo = commands.add_parser("demo", help="end-to-end demo: HTTP ingest -> queue -> Parquet lake")
    demo.add_argument("--out", default="out/demo", help="where the report and the copy of the lake go")
    demo.set_defaults(func=cmd_demo)


# ---- invoke -------------------------------------------------------------------------------------
def read_event(source: str) -> Any:
    """The JSON event in file ``source``, or on stdin for ``-`` (as ``sam local invoke -e``)."""
    where = "stdin" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
        return json.loads(text)
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read the event from {where}: {exc}", 2) from exc


def cmd_invoke(args: argparse.Namespace) -> int:
    """Invoke one function with an event (a file, stdin, or the default event of the function, as
    ``sam local invoke`` does), against the running stack or an ephemeral one."""
    from opslake_local.invoke import FunctionError, Invoker, default_event
    from opslake_local.stack import LocalStack
    from opslake_local.template import Template, find_template

    template_path = find_template(args.template)
    given = read_event(args.event) if args.event is not None else None

    def event_for(template: Template) -> Any:
        return given if args.event is not None else default_event(template, args.function)

    state = running_stack(template_path, args.state, stale_is_error=True)
    try:
        if state is not None:
            print(f"(using the running local stack at {state['moto_endpoint']})", file=sys.stderr)
            template = Template(template_path, parameters=llm_parameters()[0])
            for logical_id, url in state["queues"].items():
                template.set_queue_url(logical_id, url)
            with stack_environment(state):
                result = Invoker(template).invoke(args.function, event_for(template))
        else:
            print("(no local stack running: starting an ephemeral one; it keeps nothing)", file=sys.stderr)
            with LocalStack(template_path, parameters=llm_parameters()[0]) as stack:
                result = stack.invoker().invoke(args.function, event_for(stack.template))
    except FunctionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


def add_invoke(commands: Commands) -> None:
    invoke = commands.add_parser("invoke", help="invoke a function (template logical id) with an event")
    invoke.add_argument("function", help="logical id, e.g. EventsFunction")
    invoke.add_argument(
        "-e",
        "--event",
        default=None,
        help="JSON event file, e.g. events/health_get.json, or - for stdin (default: a scheduled "
        "function gets the event its schedule sends, any other function {})",
    )
    invoke.set_defaults(func=cmd_invoke)


# ---- schedule run -------------------------------------------------------------------------------
def cmd_schedule_run(args: argparse.Namespace) -> int:
    """Send one EventBridge scheduled event to a function now, on the running local stack."""
    from opslake_local.invoke import FunctionError, Invoker
    from opslake_local.schedule import find_schedule
    from opslake_local.template import Template, find_template

    state = require_stack(args)
    template = Template(find_template(args.template))
    for logical_id, url in state.get("queues", {}).items():
        template.set_queue_url(logical_id, url)
    try:
        schedule = find_schedule(template, args.function)
    except KeyError as exc:
        raise CliError(str(exc.args[0]), 2) from exc
    event = schedule.event(datetime.now(UTC), region=template.region, account_id=template.account_id)
    with stack_environment(state):
        try:
            result = Invoker(template).invoke(schedule.function, event)
        except FunctionError as exc:
            raise CliError(str(exc)) from exc
    print(json.dumps(result, indent=2, default=str))
    return 0


def add_schedule(commands: Commands) -> None:
    schedule = commands.add_parser("schedule", help="scheduled functions").add_subparsers(
        dest="schedule_command", required=True
    )
    schedule_run = schedule.add_parser("run", help="send one EventBridge scheduled event to a function now")
    schedule_run.add_argument("function", help="logical id of a function with a Schedule event")
    schedule_run.set_defaults(func=cmd_schedule_run)
