"""``opslake tools``: the tool catalog opslake learned from the traffic (``list``), and tool schemas a
team registers so the catalog knows its tools before the traffic does (``register``), on the local
stack or, with ``--aws``, on the deployed one."""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from opslake_local.cli.target import (
    CliError,
    Commands,
    aws_client,
    aws_options,
    local_client,
    require_stack,
    stack_output,
)


def catalog_target(args: argparse.Namespace) -> tuple[Any, str, Any, str, str]:
    """(S3 client, lake bucket, Glue client, Glue database, where) of the local stack or, with --aws,
    the deployed one."""
    if args.aws:
        return (
            aws_client("s3", args.region), stack_output(args, "LakeBucketName"), aws_client("glue", args.region),
            stack_output(args, "GlueDatabaseName"), f"stack {args.stack_name}",
        )  # fmt: skip
    state = require_stack(args)
    database = str(state.get("environment", {}).get("OPSLAKE_GLUE_DATABASE") or "opslake")
    return (
        local_client(state, "s3"),
        str(state["bucket"]),
        local_client(state, "glue"),
        database,
        "local stack",
    )


def read_tables(args: argparse.Namespace) -> dict[str, list[str]]:
    """The target's Glue tables and columns (what the fence and the gate know of opslake's own data);
    a CliError naming the database when Glue cannot be read."""
    from botocore.exceptions import BotoCoreError, ClientError

    from opslake.jobs.catalog import read_tables as glue_tables

    _, _, glue, database, _ = catalog_target(args)
    try:
        return glue_tables(glue, database)
    except (BotoCoreError, ClientError) as exc:
        raise CliError(f"cannot read the tables of Glue database {database!r}: {exc}") from exc


def catalog_rows(s3: Any, bucket: str) -> list[dict[str, Any]]:
    """The ``tool_catalog`` table as the consolidator last wrote it (its ``known`` and ``reporters``
    under the deployment's own trust levels); empty before its first run."""
    from opslake.lake import derived

    try:
        body = s3.get_object(Bucket=bucket, Key=derived.whole_table_key("tool_catalog"))["Body"].read()
    except s3.exceptions.NoSuchKey:
        return []
    return derived.read_rows(body)


def _percent(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def cmd_tools_list(args: argparse.Namespace) -> int:
    """Every tool of the catalog with its calls, failures, independent reporters, whether the learning
    logic may name it (known), its arguments with their forms, the tools called before it, and its
    most frequent error templates."""
    from opslake_local.console import text_table

    s3, bucket, _, _, where = catalog_target(args)
    rows = catalog_rows(s3, bucket)
    if not rows:
        print(f"the {where} has no tool catalog yet: the consolidator writes it at its next run")
        return 0
    if args.format == "json":
        print(json.dumps(rows, default=str, indent=2))
        return 0
    by_tool: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        by_tool[row["endpoint"]][row["item"]].append(row)
    table = []
    for endpoint, items in by_tool.items():
        (tool,) = items["tool"] or [
            {"calls": 0, "failures": 0, "reporters": 0, "known": False, "declared": True}
        ]
        if not args.all and not tool["known"]:
            continue
        shapes: dict[str, list[str]] = defaultdict(list)
        for shape in items["shape"]:
            if shape["known"]:
                shapes[shape["name"]].append(shape["shape"])
        arguments = [
            f"{a['name']}" + (f" ({', '.join(shapes[a['name']][:4])})" if shapes[a["name"]] else "")
            for a in items["argument"]
            if a["known"] or args.all
        ]
        before = [p["name"] for p in items["preceded_by"] if p["known"]][:3]
        errors = [re.sub(r"^[^|]*\|[^|]*\| ?", "", e["detail"] or "")[:60] for e in items["error"]][:2]
        table.append(
            (endpoint, tool["calls"], _percent(tool["failures"], tool["calls"]), tool["reporters"],
             "yes" if tool["known"] else "no", "; ".join(arguments)[:100], ", ".join(before), " / ".join(errors))
        )  # fmt: skip
    header = ["tool", "calls", "failed", "reporters", "known", "arguments (forms)", "called before", "errors"]
    print(text_table(header, table))
    hidden = len(by_tool) - len(table)
    if hidden:
        print(
            f"{hidden} more tools are not known yet (fewer than two independent reporters): --all shows them"
        )
    return 0


def cmd_tools_register(args: argparse.Namespace) -> int:
    """Register tool schemas (an MCP tools/list result, OpenAI function definitions, JSON Schema) so
    the catalog knows the tools and their arguments before the traffic does."""
    from opslake.analysis.catalog.declared import DeclaredSchemaError, declared_tools
    from opslake.jobs.catalog import CatalogStore

    path = Path(args.file)
    try:
        document = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read {path} as JSON: {exc}", 2) from exc
    try:
        tools = declared_tools(document, prefix=args.prefix)
    except DeclaredSchemaError as exc:
        raise CliError(f"{path}: {exc}", 2) from exc
    name = args.name or re.sub(r"[^a-z0-9_-]+", "-", path.stem.lower()).strip("-_") or "schemas"
    s3, bucket, _, _, where = catalog_target(args)
    try:
        key = CatalogStore(s3, bucket).register(name, tools)
    except ValueError as exc:
        raise CliError(str(exc), 2) from exc
    names = ", ".join(t.endpoint for t in tools[:5]) + (" …" if len(tools) > 5 else "")
    print(f"registered {len(tools)} tool(s) in the {where} as {key}: {names}")
    print("the consolidator's next run adds them to the catalog (`opslake tools list --all` then shows them)")
    return 0


def add_tools(commands: Commands) -> None:
    tools = commands.add_parser(
        "tools",
        help="the tool catalog learned from traffic, and registered tool schemas (local stack, or --aws)",
    ).add_subparsers(dest="tools_command", required=True)
    listing = tools.add_parser("list", help="every known tool: calls, failures, arguments and their forms")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    listing.add_argument("--all", action="store_true", help="also tools and arguments not known yet")
    aws_options(listing, "lake")
    listing.set_defaults(func=cmd_tools_list)
    register = tools.add_parser(
        "register", help="register tool schemas: an MCP tools/list result, OpenAI functions or JSON Schema"
    )
    register.add_argument("file", help="a JSON file")
    register.add_argument("--name", default=None, help="the schema set's name (default: the file's name)")
    register.add_argument(
        "--prefix",
        default="tool:",
        help="endpoint prefix of the tools (default tool:, as tool spans are named)",
    )
    aws_options(register, "lake")
    register.set_defaults(func=cmd_tools_register)
