"""The ``opslake`` argument parser and entry point: the global options, then each command module's
commands, in the order ``opslake --help`` lists them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from opslake_local.cli import (
    admin_commands,
    doctor_commands,
    mcp_commands,
    query_commands,
    stack_commands,
    tools_commands,
)
from opslake_local.cli.target import STATE_ENV, CliError


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
    stack_commands.add_local(commands)
    stack_commands.add_demo(commands)
    stack_commands.add_invoke(commands)
    query_commands.add_query(commands)
    query_commands.add_queries(commands)
    query_commands.add_report(commands)
    admin_commands.add_keys(commands)
    stack_commands.add_schedule(commands)
    admin_commands.add_playbooks(commands)
    tools_commands.add_tools(commands)
    admin_commands.add_dataset(commands)
    mcp_commands.add_mcp(commands)
    doctor_commands.add_doctor(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``opslake`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
