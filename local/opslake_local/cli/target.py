"""Where a command acts: the local stack that ``opslake local up`` runs (found through its state
file), or a deployed stack (the user's AWS configuration and the stack's outputs).

Every boto3 client made here has opslake's retry configuration (:func:`opslake.runtime.new_client`).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeAlias

#: What ``add_subparsers`` returns: each command module adds its commands to it.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

STATE_FILE = Path(".opslake/local.json")
STATE_ENV = "OPSLAKE_LOCAL_STATE"
#: Where ``opslake local up`` keeps the lake, queues and API keys between runs (next to template.yaml).
DATA_DIR = Path(".opslake/data")
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
DEFAULT_STACK_NAME = "opslake"
#: How long a stack that accepts connections may take to answer before it counts as gone: a busy
#: stack (a simulator run, a long drain) answers late, and must not be taken for a dead one.
LIVENESS_PATIENCE_S = 5.0


class CliError(Exception):
    """A failure to report as ``error: <message>`` with an exit code (1 failed, 2 usage)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def state_path(template: Path, override: Path | None = None) -> Path:
    """``--state``, else ``$OPSLAKE_LOCAL_STATE``, else .opslake/local.json next to template.yaml."""
    if override is not None:
        return override
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    return template.parent / STATE_FILE


def data_path(template: Path, override: Path | None = None) -> Path:
    """``--data-dir``, else .opslake/data/ next to template.yaml (git-ignored with all of .opslake/)."""
    return override if override is not None else template.parent / DATA_DIR


def _moto_alive(endpoint: str, patience_s: float = LIVENESS_PATIENCE_S) -> bool:
    """Whether a moto server answers at ``endpoint``: a HEAD of moto's small dashboard page (never
    its whole state), where any HTTP answer is life. A refused connection is death at once (nothing
    listens); a slow answer is retried until ``patience_s`` has passed."""
    deadline = time.monotonic() + patience_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            request = urllib.request.Request(f"{endpoint}/moto-api/", method="HEAD")
            with urllib.request.urlopen(request, timeout=max(0.5, min(2.0, remaining))):
                return True
        except urllib.error.HTTPError:
            return True  # an error status is still an answer from a live server
        except ConnectionRefusedError:
            return False
        except (OSError, ValueError):  # a timeout, a reset, or no endpoint at all
            if remaining <= 0 or not endpoint:
                return False
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def running_stack(
    template: Path, state_file: Path | None = None, *, stale_is_error: bool = False
) -> dict[str, Any] | None:
    """The state of a stack started by ``opslake local up`` that is still answering, if any. With
    ``stale_is_error``, a state file whose stack does not answer is a CliError (exit 2) rather than
    None, so that a caller that would otherwise start an empty stack of its own says so instead."""
    path = state_path(template, state_file)
    if not path.is_file():
        return None
    state: dict[str, Any] = json.loads(path.read_text())
    endpoint = state.get("moto_endpoint", "")
    if _moto_alive(endpoint):
        return state
    if stale_is_error:
        raise CliError(
            f"{path} says a local stack runs at {endpoint or '(no endpoint)'}, but its moto server does "
            "not answer. If the stack was stopped, delete that file (or run `opslake local up` again); "
            "nothing was started in its place.",
            code=2,
        )
    return None


def require_stack(args: argparse.Namespace) -> dict[str, Any]:
    """The running local stack's state, or a CliError (exit 2) that says how to start one."""
    from opslake_local.template import find_template

    template = find_template(args.template)
    state = running_stack(template, args.state)
    if state is None:
        path = state_path(template, args.state)
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


@contextmanager
def local_environment(state: Mapping[str, Any] | None) -> Iterator[None]:
    """:func:`stack_environment` for a local stack's ``state``; no change for a deployed stack (None)."""
    if state is None:
        yield
        return
    with stack_environment(state):
        yield


def local_client(state: Mapping[str, Any], service: str) -> Any:
    """A client for the running local stack's moto server (explicit endpoint and credentials)."""
    from opslake.runtime import new_client

    return new_client(
        service,
        endpoint_url=state["moto_endpoint"],
        region_name=state.get("region", "us-east-1"),
        aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )


def aws_client(service: str, region: str | None) -> Any:
    """A client for AWS itself, from the user's AWS configuration (``region`` None: its default)."""
    from opslake.runtime import new_client

    return new_client(service, region_name=region)


def stack_outputs(stack_name: str, region: str | None) -> dict[str, str]:
    """A deployed stack's CloudFormation outputs (the user's AWS configuration)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        stacks = aws_client("cloudformation", region).describe_stacks(StackName=stack_name)
    except (BotoCoreError, ClientError) as exc:
        raise CliError(f"cannot read the outputs of stack {stack_name!r}: {exc}") from exc
    return {o["OutputKey"]: o["OutputValue"] for o in stacks["Stacks"][0].get("Outputs", [])}


def stack_output(args: argparse.Namespace, output: str) -> str:
    """One output of the deployed stack ``--stack-name`` (in ``--region``); a CliError if it has none."""
    value = stack_outputs(args.stack_name, args.region).get(output)
    if not value:
        raise CliError(f"stack {args.stack_name!r} has no {output} output")
    return value


def aws_options(command: argparse.ArgumentParser, what: str) -> None:
    """``--aws`` (act on ``what`` of the deployed stack), ``--stack-name`` and ``--region``."""
    command.add_argument("--aws", action="store_true", help=f"the deployed stack's {what}, not the local one")
    command.add_argument("--stack-name", default=DEFAULT_STACK_NAME, help="deployed stack (with --aws)")
    command.add_argument("--region", default=None, help="AWS region (default: your configuration)")
