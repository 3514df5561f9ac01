"""Commands that read the lake with Athena SQL: ``query``, ``queries list|run`` and ``report``, on
the local stack's embedded engine or, with ``--athena``, on Athena."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from opslake_local.cli.target import (
    DEFAULT_STACK_NAME,
    CliError,
    Commands,
    aws_client,
    local_client,
    local_environment,
    require_stack,
    stack_outputs,
)


def engine(args: argparse.Namespace) -> Any:
    """The embedded engine on the running local stack, or Athena with ``--athena``."""
    from opslake.config import Settings, load_settings
    from opslake.query.factory import create_engine

    if args.athena:
        workgroup, database = args.workgroup, args.database
        if not (workgroup and database):
            outputs = stack_outputs(args.stack_name, args.region)
            workgroup = workgroup or outputs.get("AthenaWorkGroupName")
            database = database or outputs.get("GlueDatabaseName")
        if not (workgroup and database):
            raise CliError("--athena needs --workgroup and --database (or a stack with those outputs)", 2)
        settings = Settings(query_engine="athena", athena_workgroup=workgroup, glue_database=database)
        return create_engine(settings, athena_client=aws_client("athena", args.region))
    state = require_stack(args)
    settings = load_settings({**state.get("environment", {}), "OPSLAKE_QUERY_ENGINE": "embedded"})
    return create_engine(settings, glue_client=local_client(state, "glue"))


def engine_options(command: argparse.ArgumentParser) -> None:
    """The options of every command that runs SQL: output format, timeout and the Athena target."""
    command.add_argument("--format", choices=("table", "json", "csv"), default="table")
    command.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
    command.add_argument("--athena", action="store_true", help="run on Athena (your AWS configuration)")
    command.add_argument("--workgroup", help="Athena workgroup (default: the stack's output)")
    command.add_argument("--database", help="Glue database (default: the stack's output)")
    command.add_argument("--stack-name", default=DEFAULT_STACK_NAME, help="deployed stack (--athena)")
    command.add_argument("--region", default=None, help="AWS region (default: your configuration)")


def _run_sql(args: argparse.Namespace, sql: str) -> int:
    """Run one statement and print its result in ``args.format``."""
    from opslake.query.base import QueryError
    from opslake_local.queries import render

    state = None if args.athena else require_stack(args)
    with local_environment(state):
        sql_engine = engine(args)
        try:
            result = sql_engine.run(sql, timeout_s=args.timeout)
        except QueryError as exc:
            raise CliError(f"query failed: {exc.message}") from exc
    print(render(result, args.format))
    return 0


# ---- query --------------------------------------------------------------------------------------
def cmd_query(args: argparse.Namespace) -> int:
    """Run Athena SQL on the local stack's lake (embedded engine) or on Athena."""
    return _run_sql(args, args.sql)


def add_query(commands: Commands) -> None:
    query = commands.add_parser("query", help="run Athena SQL on the local stack's lake (or --athena)")
    query.add_argument("sql", help='one SQL statement, e.g. "SELECT count(*) FROM ops"')
    engine_options(query)
    query.set_defaults(func=cmd_query)


# ---- queries ------------------------------------------------------------------------------------
def _queries(args: argparse.Namespace) -> dict[str, Any]:
    from opslake_local.queries import load_queries, queries_dir
    from opslake_local.template import find_template

    return load_queries(queries_dir(find_template(args.template)))


def cmd_queries_list(args: argparse.Namespace) -> int:
    """The analyst queries in queries/ (also deployed as Athena named queries)."""
    from opslake_local.console import text_table

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


def add_queries(commands: Commands) -> None:
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


# ---- report -------------------------------------------------------------------------------------
def cmd_report(args: argparse.Namespace) -> int:
    """Write the HTML report of the local stack's lake (or, with --athena, the deployed one's)."""
    from opslake_local.report import build_report, write_report

    summary = None
    if args.summary:
        try:
            summary = json.loads(Path(args.summary).read_text())
        except (OSError, ValueError) as exc:
            raise CliError(f"cannot read the summary {args.summary}: {exc}", 2) from exc
    state = None if args.athena else require_stack(args)
    with local_environment(state):
        html = build_report(engine(args), summary=summary, timeout_s=args.timeout)
    path = write_report(Path(args.out), html)
    print(f"report written to {path} ({len(html):,} bytes)")
    return 0


def add_report(commands: Commands) -> None:
    report = commands.add_parser(
        "report", help="write a self-contained HTML report of the lake (or --athena)"
    )
    report.add_argument(
        "--out", default="out/report.html", help="where to write it (default out/report.html)"
    )
    report.add_argument("--summary", default=None, help="a demo summary JSON file (failure rate per cycle)")
    engine_options(report)
    report.set_defaults(func=cmd_report)
