"""The ``opslake`` command line.

``opslake local up`` runs the stack, the local API, a background drainer and the scheduler until
Ctrl-C and records where they are in a state file (``.opslake/local.json`` next to template.yaml;
``--state`` or ``OPSLAKE_LOCAL_STATE`` moves it). The other commands use that running stack:
``query`` / ``queries`` (Athena SQL on the embedded engine, or on Athena with ``--athena``),
``keys`` (API keys in the stack's usage plan, or a deployed stack's with ``--aws``),
``schedule run``, ``report`` (a self-contained HTML report of the lake, local or ``--athena``),
``invoke`` (which starts an ephemeral stack when none runs), and ``mcp`` (a stdio MCP server that
forwards to the local or a deployed stack's POST /mcp), and ``doctor`` (checks a stack end to end:
a probe op, the key, the queues, the jobs, the alarms and the model; local, or ``--aws``).
Exit codes: 0 done, 1 the operation failed, 2 bad usage or no running stack.

Modules: :mod:`.parser` (the parser and ``main``), :mod:`.target` (the running local stack or a
deployed one, and their clients), :mod:`.stack_commands` (local up, demo, invoke, schedule run),
:mod:`.query_commands` (query, queries, report), :mod:`.admin_commands` (keys, playbooks, dataset),
:mod:`.tools_commands` (tools list, tools register), :mod:`.mcp_commands` (mcp),
:mod:`.doctor_commands` (doctor; its checks are in :mod:`opslake_local.doctor`).
"""

from opslake_local.cli.parser import build_parser, main
from opslake_local.cli.target import CliError, running_stack, stack_environment

__all__ = ["CliError", "build_parser", "main", "running_stack", "stack_environment"]
