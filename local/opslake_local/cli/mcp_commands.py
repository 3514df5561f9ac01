"""``opslake mcp``: a stdio MCP server for agents configured with a command. It forwards to the
``POST /mcp`` of the local stack (``--local``, the default), of a stack at ``--url`` (or
``$OPSLAKE_URL``), or of the deployed stack ``--aws --stack-name S``; the API key comes from
``--api-key`` or ``$OPSLAKE_API_KEY`` (the local stack's own key by default with ``--local``).

The MCP SDK is imported only when the command runs, so the CLI's other commands do not pay for it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from opslake_local.cli.target import DEFAULT_STACK_NAME, CliError, Commands, stack_output, state_path

if TYPE_CHECKING:
    from opslake_local.mcp_forward import Endpoint

URL_ENV = "OPSLAKE_URL"
KEY_ENV = "OPSLAKE_API_KEY"


def resolve_target(
    args: argparse.Namespace, environ: dict[str, str] | None = None
) -> tuple[Callable[[], Endpoint], str, str]:
    """(endpoint resolver, hint for failures, what to name the target in logs) for ``args``.

    A deployed stack is resolved once, here (a missing key or URL is a usage error, exit 2); the
    local stack's state file is read again for every request, so ``opslake mcp --local`` may start
    before ``opslake local up`` and follows a restarted stack."""
    from opslake_local.mcp_forward import Endpoint, local_endpoint, mcp_url

    env = os.environ if environ is None else environ
    url = args.url or (None if args.local or args.aws else env.get(URL_ENV) or None)
    if url is None and not args.aws:
        from opslake_local.template import find_template

        path = state_path(find_template(args.template), args.state)
        return (
            (lambda: local_endpoint(path, args.api_key)),
            "start it with `opslake local up`",
            f"local {path}",
        )
    key = args.api_key or env.get(KEY_ENV)
    if not key:
        raise CliError(f"a deployed stack needs an API key: --api-key or ${KEY_ENV}", 2)
    if url is None:
        url = stack_output(args, "ApiUrl")
        hint = f"check --stack-name {args.stack_name} and --region"
    else:
        hint = "check --url (the stack's ApiUrl output)"
    try:
        endpoint = Endpoint(mcp_url(url), key)
    except ValueError as exc:
        raise CliError(str(exc), 2) from exc
    return (lambda: endpoint), hint, endpoint.url


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve MCP over stdio, forwarding to the stack, until the client closes stdin (or SIGINT)."""
    resolve, hint, where = resolve_target(args)
    # stdout is the protocol's: everything else (the SDK's logs, ours) goes to stderr
    logging.basicConfig(stream=sys.stderr, level=logging.INFO if args.verbose else logging.WARNING)
    try:
        interruptible()
        from opslake_local.mcp_forward import StackForwarder
        from opslake_local.mcp_stdio import serve

        logging.getLogger("opslake.mcp").info("forwarding MCP over stdio to %s", where)
        serve(StackForwarder(resolve, hint, timeout_s=args.timeout))
    except KeyboardInterrupt:  # SIGINT while the SDK was still loading: as quiet as when serving
        pass
    return 0


def interruptible() -> None:
    """Make SIGINT end the server even when the process started with SIGINT ignored.

    A non-interactive shell starts background jobs that way (``make test &``, CI steps, an agent
    host launched so), and the ignoring is inherited: Python then installs no KeyboardInterrupt
    handler, asyncio none of its own, and an agent host's SIGINT did nothing (the server ran until
    stdin closed). Done before the SDK's import (about a second), so no SIGINT is missed then."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()  # not so when a test calls main()
    if main and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def add_mcp(commands: Commands) -> None:
    mcp = commands.add_parser(
        "mcp",
        help="a stdio MCP server for agents: forwards to the local stack's POST /mcp (or --url / --aws)",
        description="Serve MCP over stdin/stdout for an agent configured with a command, e.g. "
        '{"command": "opslake", "args": ["mcp", "--url", "https://…/prod"], '
        '"env": {"OPSLAKE_API_KEY": "…"}}. Tools and resources are the stack\'s own, and every tool '
        "call is an op record with source=mcp.",
    )
    target = mcp.add_mutually_exclusive_group()
    target.add_argument(
        "--local", action="store_true", help="the stack `opslake local up` runs (default without --url)"
    )
    target.add_argument(
        "--url", default=None, help=f"a stack's API base URL, its ApiUrl output (default ${URL_ENV})"
    )
    target.add_argument("--aws", action="store_true", help="the deployed stack --stack-name (its ApiUrl)")
    mcp.add_argument("--stack-name", default=DEFAULT_STACK_NAME, help="deployed stack (with --aws)")
    mcp.add_argument("--region", default=None, help="AWS region (default: your configuration)")
    mcp.add_argument(
        "--api-key",
        default=None,
        help=f"API key (default ${KEY_ENV}; with --local, the local stack's own key)",
    )
    mcp.add_argument(
        "--timeout", type=float, default=40.0, help="seconds to wait for the stack per request (default 40)"
    )
    mcp.add_argument("--verbose", action="store_true", help="log each forwarding target to stderr")
    mcp.set_defaults(func=cmd_mcp)
