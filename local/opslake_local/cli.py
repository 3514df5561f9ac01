"""The ``opslake`` command line.

``opslake local up`` runs the stack, the local API, a background drainer and the scheduler until
Ctrl-C and records where they are in a state file (``.opslake/local.json`` next to template.yaml;
``--state`` or ``OPSLAKE_LOCAL_STATE`` moves it). The other commands use that running stack:
``query`` / ``queries`` (Athena SQL on the embedded engine, or on Athena with ``--athena``),
``keys`` (API keys in the stack's usage plan, or a deployed stack's with ``--aws``),
``schedule run``, ``report`` (a self-contained HTML report of the lake, local or ``--athena``),
and ``invoke`` (which starts an ephemeral stack when none runs).
Exit codes: 0 done, 1 the operation failed, 2 bad usage or no running stack.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

STATE_FILE = Path(".opslake/local.json")
STATE_ENV = "OPSLAKE_LOCAL_STATE"
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
DEFAULT_STACK_NAME = "opslake"


class CliError(Exception):
    """A failure to report as ``error: <message>`` with an exit code (1 failed, 2 usage)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _state_path(template: Path, override: Path | None = None) -> Path:
    """``--state``, else ``$OPSLAKE_LOCAL_STATE``, else .opslake/local.json next to template.yaml."""
    if override is not None:
        return override
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    return template.parent / STATE_FILE


def _moto_alive(endpoint: str) -> bool:
    """Whether a moto server answers at ``endpoint``."""
    try:
        with urllib.request.urlopen(f"{endpoint}/moto-api/data.json", timeout=1):
            return True
    except OSError:
        return False


def running_stack(template: Path, state_file: Path | None = None) -> dict[str, Any] | None:
    """The state of a stack started by ``opslake local up`` that is still answering, if any."""
    path = _state_path(template, state_file)
    if not path.is_file():
        return None
    state: dict[str, Any] = json.loads(path.read_text())
    return state if _moto_alive(state.get("moto_endpoint", "")) else None


def _require_stack(args: argparse.Namespace) -> dict[str, Any]:
    """The running local stack's state, or a CliError (exit 2) that says how to start one."""
    from opslake_local.template import find_template

    template = find_template(args.template)
    state = running_stack(template, args.state)
    if state is None:
        path = _state_path(template, args.state)
        why = "its moto server does not answer" if path.is_file() else "there is no state file"
        raise CliError(
            f"no local stack is running ({path}: {why}). Start one with `opslake local up` "
            "in another terminal, or use --athena / --aws for the deployed stack.",
            code=2,
        )
    return state


@contextmanager
def stack_environment(state: Mapping[str, Any]) -> Iterator[None]:
    """Point this process's AWS configuration at the running stack's moto server (and restore it)."""
    values = {**state.get("environment", {}), **LOCAL_CREDENTIALS, "AWS_ENDPOINT_URL": state["moto_endpoint"]}
    saved = {name: os.environ.get(name) for name in [*values, "AWS_PROFILE", "AWS_SESSION_TOKEN"]}
    os.environ.pop("AWS_PROFILE", None)
    os.environ.pop("AWS_SESSION_TOKEN", None)
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _local_client(state: Mapping[str, Any], service: str) -> Any:
    import boto3

    return boto3.client(  # type: ignore[call-overload]
        service,
        endpoint_url=state["moto_endpoint"],
        region_name=state.get("region", "us-east-1"),
        aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )


def _stack_outputs(stack_name: str, region: str | None) -> dict[str, str]:
    """A deployed stack's CloudFormation outputs (the user's AWS configuration)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        stacks = boto3.client("cloudformation", region_name=region).describe_stacks(StackName=stack_name)
    except (BotoCoreError, ClientError) as exc:
        raise CliError(f"cannot read the outputs of stack {stack_name!r}: {exc}") from exc
    return {o["OutputKey"]: o["OutputValue"] for o in stacks["Stacks"][0].get("Outputs", [])}


# ---- commands -----------------------------------------------------------------------------------
def cmd_local_up(args: argparse.Namespace) -> int:
    """Run stack + API + drainer in the foreground until Ctrl-C."""
    from opslake_local.drain import BackgroundDrainer, Drainer, DrainResult
    from opslake_local.http import LocalApi
    from opslake_local.schedule import Run, Scheduler
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

        def scheduled(run: Run) -> None:
            outcome = f"failed: {run.error}" if run.error else "ok"
            print(f"schedule: {run.schedule.function} ({run.schedule.expression.text}) {outcome}", flush=True)

        drainer = BackgroundDrainer(Drainer(stack, invoker), interval_s=args.poll, on_batch=report).start()
        scheduler = Scheduler(stack.template, invoker.invoke, on_run=scheduled).start()
        state_path = _state_path(stack.template.path, args.state)
        state = {"api_url": base_url, **stack.describe(), "pid": os.getpid()}
        state_path.parent.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps(state, indent=2) + "\n")
        print(f"opslake local stack is up ({stack.template.path})")
        print(f"  API          {base_url}   (routes: "
              + ", ".join(f"{r.method} {r.path}" for r in stack.template.api_routes()) + ")")  # fmt: skip
        print(f"  API key      {stack.api_key.value if stack.api_key else '-'}   (name {stack.key_name})")
        print(f"  moto         {stack.endpoint}   (AWS_ENDPOINT_URL for boto3 / aws CLI)")
        print(f"  bucket       {stack.bucket}")
        jobs = (
            ", ".join(f"{s.function} {s.expression.text}" for s in scheduler.schedules)
            or "none in the template"
        )
        print(f"  schedules    {jobs}")
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
            if args.state is None and not any(state_path.parent.iterdir()):  # only our own .opslake/
                state_path.parent.rmdir()
            scheduler.stop()
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
    state = running_stack(template_path, args.state)
    try:
        if state is not None:
            os.environ.update(state["environment"])
            os.environ.update(LOCAL_CREDENTIALS)
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


def _engine(args: argparse.Namespace) -> Any:
    """The embedded engine on the running local stack, or Athena with ``--athena``."""
    from opslake.config import Settings, load_settings
    from opslake.query.factory import create_engine

    if args.athena:
        import boto3

        workgroup, database = args.workgroup, args.database
        if not (workgroup and database):
            outputs = _stack_outputs(args.stack_name, args.region)
            workgroup = workgroup or outputs.get("AthenaWorkGroupName")
            database = database or outputs.get("GlueDatabaseName")
        if not (workgroup and database):
            raise CliError("--athena needs --workgroup and --database (or a stack with those outputs)", 2)
        settings = Settings(query_engine="athena", athena_workgroup=workgroup, glue_database=database)
        return create_engine(settings, athena_client=boto3.client("athena", region_name=args.region))
    state = _require_stack(args)
    settings = load_settings({**state.get("environment", {}), "OPSLAKE_QUERY_ENGINE": "embedded"})
    return create_engine(settings, glue_client=_local_client(state, "glue"))


def _run_sql(args: argparse.Namespace, sql: str) -> int:
    """Run one statement and print its result in ``args.format``."""
    from opslake.query.base import QueryError
    from opslake_local.queries import render

    state = None if args.athena else _require_stack(args)
    with stack_environment(state) if state is not None else _no_change():
        engine = _engine(args)
        try:
            result = engine.run(sql, timeout_s=args.timeout)
        except QueryError as exc:
            raise CliError(f"query failed: {exc.message}") from exc
    print(render(result, args.format))
    return 0


@contextmanager
def _no_change() -> Iterator[None]:
    yield


def cmd_query(args: argparse.Namespace) -> int:
    """Run Athena SQL on the local stack's lake (embedded engine) or on Athena."""
    return _run_sql(args, args.sql)


def _queries(args: argparse.Namespace) -> dict[str, Any]:
    from opslake_local.queries import load_queries, queries_dir
    from opslake_local.template import find_template

    return load_queries(queries_dir(find_template(args.template)))


def cmd_queries_list(args: argparse.Namespace) -> int:
    """The analyst queries in queries/ (also deployed as Athena named queries)."""
    from opslake_local.queries import text_table

    queries = _queries(args)
    if args.format == "json":
        print(
            json.dumps([{"name": q.name, "description": q.description} for q in queries.values()], indent=2)
        )
    else:
        print(text_table(["name", "description"], [(q.name, q.description) for q in queries.values()]))
    return 0


def cmd_queries_run(args: argparse.Namespace) -> int:
    """Run one analyst query by name."""
    queries = _queries(args)
    if args.name not in queries:
        raise CliError(f"no query {args.name!r} in queries/ (known: {', '.join(queries)})", 2)
    return _run_sql(args, queries[args.name].sql)


def cmd_report(args: argparse.Namespace) -> int:
    """Write the HTML report of the local stack's lake (or, with --athena, the deployed one's)."""
    from opslake_local.report import build_report, write_report

    summary = None
    if args.summary:
        try:
            summary = json.loads(Path(args.summary).read_text())
        except (OSError, ValueError) as exc:
            raise CliError(f"cannot read the summary {args.summary}: {exc}", 2) from exc
    state = None if args.athena else _require_stack(args)
    with stack_environment(state) if state is not None else _no_change():
        html = build_report(_engine(args), summary=summary, timeout_s=args.timeout)
    path = write_report(Path(args.out), html)
    print(f"report written to {path} ({len(html):,} bytes)")
    return 0


def _keys_target(args: argparse.Namespace) -> tuple[Any, str, str]:
    """(API Gateway client, usage plan id, where) for the local stack or, with --aws, AWS."""
    if args.aws:
        import boto3

        plan = _stack_outputs(args.stack_name, args.region).get("ApiUsagePlanId")
        if not plan:
            raise CliError(f"stack {args.stack_name!r} has no ApiUsagePlanId output")
        return boto3.client("apigateway", region_name=args.region), plan, f"stack {args.stack_name}"
    state = _require_stack(args)
    plan = state.get("usage_plan_id")
    if not plan:
        raise CliError("the running local stack recorded no usage plan; restart `opslake local up`")
    return _local_client(state, "apigateway"), str(plan), f"local stack {state['moto_endpoint']}"


def cmd_keys_create(args: argparse.Namespace) -> int:
    """Create an API key (its name becomes reporter_id) in the usage plan; print its value once."""
    from opslake_local.stack import create_plan_key

    client, plan, where = _keys_target(args)
    key = create_plan_key(client, plan, args.name)
    print(f"created API key {key.name!r} (id {key.id}) in usage plan {plan} of the {where}")
    print(f"x-api-key: {key.value}")
    print("(the value is shown only this once: store it now)")
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    """The usage plan's keys (never their values)."""
    from opslake_local.queries import text_table
    from opslake_local.stack import plan_keys

    client, plan, _where = _keys_target(args)
    keys = plan_keys(client, plan)
    if args.format == "json":
        print(json.dumps(keys, indent=2, default=str))
    else:
        rows = [(k["name"], k["id"], "yes" if k["enabled"] else "no", k["created"]) for k in keys]
        print(text_table(["name", "id", "enabled", "created"], rows))
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    """Delete the usage plan's keys with this name: requests with them get 403 from then on."""
    from opslake_local.stack import revoke_plan_keys

    client, plan, _where = _keys_target(args)
    revoked = revoke_plan_keys(client, plan, args.name)
    if not revoked:
        raise CliError(f"no API key named {args.name!r} in usage plan {plan}")
    print(f"revoked {len(revoked)} API key(s) named {args.name!r}: {', '.join(revoked)}")
    return 0


def cmd_schedule_run(args: argparse.Namespace) -> int:
    """Send one EventBridge scheduled event to a function now, on the running local stack."""
    from opslake_local.invoke import FunctionError, Invoker
    from opslake_local.schedule import find_schedule
    from opslake_local.template import Template, find_template

    state = _require_stack(args)
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


def cmd_dataset_load(args: argparse.Namespace) -> int:
    """Write the staffing sample dataset (workers, placements) as Parquet to the stack's lake bucket."""
    from opslake_local.dataset import load_dataset

    if args.aws:
        import boto3

        bucket = _stack_outputs(args.stack_name, args.region).get("LakeBucketName")
        if not bucket:
            raise CliError(f"stack {args.stack_name!r} has no LakeBucketName output")
        client, where = boto3.client("s3", region_name=args.region), f"stack {args.stack_name}"
    else:
        state = _require_stack(args)
        bucket, where = str(state["bucket"]), f"local stack {state['moto_endpoint']}"
        client = _local_client(state, "s3")
    try:
        loaded = load_dataset(client, bucket, seed=args.seed, workers=args.workers)
    except ValueError as exc:
        raise CliError(str(exc), 2) from exc
    for table in loaded:
        print(f"{table.table}: {table.rows} rows -> s3://{bucket}/{table.key} ({table.bytes} bytes)")
    print(f"loaded the staffing dataset (seed {args.seed}) into the {where}")
    return 0


def _playbooks_target(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """(settings, S3 client, where) of the local stack's lake, or the deployed one with --aws."""
    from opslake.config import Settings

    if args.aws:
        import boto3

        bucket = _stack_outputs(args.stack_name, args.region).get("LakeBucketName")
        if not bucket:
            raise CliError(f"stack {args.stack_name!r} has no LakeBucketName output")
        return (
            Settings(lake_bucket=bucket),
            boto3.client("s3", region_name=args.region),
            f"stack {args.stack_name}",
        )
    state = _require_stack(args)
    return Settings(lake_bucket=str(state["bucket"])), _local_client(state, "s3"), "local stack"


def _consolidator_state(settings: Any, s3: Any) -> Any:
    from opslake.jobs.lease import StateStore

    return StateStore(
        s3, settings.lake_bucket, settings.consolidator_state_key, lease_s=settings.consolidator_lease_s
    )


def cmd_playbooks_list(args: argparse.Namespace) -> int:
    """Every playbook entry the consolidator keeps (proposed, active, retired), newest first."""
    from opslake.jobs.consolidator import read_entries
    from opslake_local.queries import text_table

    settings, s3, _where = _playbooks_target(args)
    entries = [e for e in read_entries(_consolidator_state(settings, s3)) if args.status in (None, e.status)]
    entries.sort(key=lambda e: e.created_at, reverse=True)
    if args.format == "json":
        print(
            json.dumps([e.model_dump(mode="json", exclude={"evidence_excerpts"}) for e in entries], indent=2)
        )
        return 0
    rows = [
        (
            e.entry_id,
            e.status,
            e.kind,
            f"{e.confidence:.2f}",
            e.evidence_agent_count,
            e.endpoint or "-",
            e.action[:70],
        )
        for e in entries
    ]
    print(text_table(["entry_id", "status", "kind", "confidence", "agents", "endpoint", "action"], rows))
    return 0


def cmd_playbooks_approve(args: argparse.Namespace) -> int:
    """Publish a proposed entry (approval mode): it reaches agents with the next GET /playbooks."""
    from opslake.analysis.playbooks import EntryNotFoundError
    from opslake.jobs.consolidator import approve_entry
    from opslake.jobs.lease import LeaseLostError
    from opslake.lake.store import S3ObjectStore

    settings, s3, where = _playbooks_target(args)
    try:
        entry = approve_entry(
            settings,
            S3ObjectStore(s3, settings.lake_bucket),
            _consolidator_state(settings, s3),
            args.entry_id,
            now=datetime.now(UTC),
        )
    except EntryNotFoundError as exc:
        raise CliError(f"no playbook entry {args.entry_id!r} (see `opslake playbooks list`)", 2) from exc
    except (ValueError, LeaseLostError) as exc:
        raise CliError(str(exc)) from exc
    print(f"approved {entry.entry_id} in the {where}: {entry.kind} - {entry.trigger} -> {entry.action}")
    return 0


# ---- parser -------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opslake", description="opslake local tools (no Docker needed)")
    parser.add_argument(
        "--template", type=Path, default=None, help="template.yaml, or a directory to look for it in"
    )
    parser.add_argument(
        "--state",
        type=Path,
        default=None,
        help=f"state file of `opslake local up` (default: ${STATE_ENV} or .opslake/local.json by template.yaml)",
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
    demo.add_argument("--out", default="out/demo", help="where the report and the copy of the lake go")
    demo.set_defaults(func=cmd_demo)

    invoke = commands.add_parser("invoke", help="invoke a function (template logical id) with an event")
    invoke.add_argument("function", help="logical id, e.g. EventsFunction")
    invoke.add_argument("--event", required=True, help="JSON event file, e.g. events/health_get.json")
    invoke.set_defaults(func=cmd_invoke)

    def engine_options(command: argparse.ArgumentParser) -> None:
        command.add_argument("--format", choices=("table", "json", "csv"), default="table")
        command.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
        command.add_argument("--athena", action="store_true", help="run on Athena (your AWS configuration)")
        command.add_argument("--workgroup", help="Athena workgroup (default: the stack's output)")
        command.add_argument("--database", help="Glue database (default: the stack's output)")
        command.add_argument("--stack-name", default=DEFAULT_STACK_NAME, help="deployed stack (--athena)")
        command.add_argument("--region", default=None, help="AWS region (default: your configuration)")

    query = commands.add_parser("query", help="run Athena SQL on the local stack's lake (or --athena)")
    query.add_argument("sql", help='one SQL statement, e.g. "SELECT count(*) FROM ops"')
    engine_options(query)
    query.set_defaults(func=cmd_query)

    queries = commands.add_parser("queries", help="the analyst queries in queries/").add_subparsers(
        dest="queries_command", required=True
    )
    listing = queries.add_parser("list", help="names and descriptions")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    listing.set_defaults(func=cmd_queries_list)
    run = queries.add_parser("run", help="run one analyst query by name")
    run.add_argument("name", help="e.g. failure_rate_by_endpoint_hour")
    engine_options(run)
    run.set_defaults(func=cmd_queries_run)

    report = commands.add_parser(
        "report", help="write a self-contained HTML report of the lake (or --athena)"
    )
    report.add_argument(
        "--out", default="out/report.html", help="where to write it (default out/report.html)"
    )
    report.add_argument("--summary", default=None, help="a demo summary JSON file (failure rate per cycle)")
    engine_options(report)
    report.set_defaults(func=cmd_report)

    keys = commands.add_parser(
        "keys", help="API keys of the usage plan (local stack, or --aws)"
    ).add_subparsers(dest="keys_command", required=True)

    def key_options(command: argparse.ArgumentParser) -> None:
        command.add_argument(
            "--aws", action="store_true", help="the deployed stack's usage plan, not the local one"
        )
        command.add_argument("--stack-name", default=DEFAULT_STACK_NAME, help="deployed stack (with --aws)")
        command.add_argument("--region", default=None, help="AWS region (default: your configuration)")

    create = keys.add_parser(
        "create", help="create a key (its name becomes reporter_id); prints the value once"
    )
    create.add_argument("name")
    key_options(create)
    create.set_defaults(func=cmd_keys_create)
    key_list = keys.add_parser("list", help="the usage plan's keys (without values)")
    key_list.add_argument("--format", choices=("table", "json"), default="table")
    key_options(key_list)
    key_list.set_defaults(func=cmd_keys_list)
    revoke = keys.add_parser("revoke", help="delete the keys with this name (403 from then on)")
    revoke.add_argument("name")
    key_options(revoke)
    revoke.set_defaults(func=cmd_keys_revoke)

    schedule = commands.add_parser("schedule", help="scheduled functions").add_subparsers(
        dest="schedule_command", required=True
    )
    schedule_run = schedule.add_parser("run", help="send one EventBridge scheduled event to a function now")
    schedule_run.add_argument("function", help="logical id of a function with a Schedule event")
    schedule_run.set_defaults(func=cmd_schedule_run)

    playbooks = commands.add_parser(
        "playbooks", help="playbook entries (local stack, or --aws)"
    ).add_subparsers(dest="playbooks_command", required=True)
    playbook_list = playbooks.add_parser("list", help="every entry the consolidator keeps, newest first")
    playbook_list.add_argument("--status", choices=("proposed", "active", "retired"), default=None)
    playbook_list.add_argument("--format", choices=("table", "json"), default="table")
    key_options(playbook_list)
    playbook_list.set_defaults(func=cmd_playbooks_list)
    approve = playbooks.add_parser("approve", help="publish a proposed entry (approval mode)")
    approve.add_argument("entry_id")
    key_options(approve)
    approve.set_defaults(func=cmd_playbooks_approve)

    dataset = commands.add_parser("dataset", help="the staffing sample dataset").add_subparsers(
        dest="dataset_command", required=True
    )
    dataset_load = dataset.add_parser(
        "load", help="write workers and placements as Parquet to the lake bucket (local stack, or --aws)"
    )
    dataset_load.add_argument("--seed", type=int, default=42, help="generator seed (default 42)")
    dataset_load.add_argument("--workers", type=int, default=3000, help="how many workers (default 3000)")
    dataset_load.add_argument(
        "--aws", action="store_true", help="the deployed stack's bucket, not the local one"
    )
    dataset_load.add_argument("--stack-name", default=DEFAULT_STACK_NAME, help="deployed stack (with --aws)")
    dataset_load.add_argument("--region", default=None, help="AWS region (default: your configuration)")
    dataset_load.set_defaults(func=cmd_dataset_load)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``opslake`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
