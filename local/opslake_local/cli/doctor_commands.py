"""``opslake doctor``: check that a stack works end to end (the checks are in :mod:`opslake_local.doctor`),
on the local stack or, with ``--aws``, on a deployed one."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from opslake_local.cli.target import (
    CliError,
    Commands,
    aws_client,
    aws_options,
    local_client,
    require_stack,
    state_path,
)
from opslake_local.doctor import (
    CHECK_NAMES,
    DEFAULT_AWS_PROBE_TIMEOUT_S,
    DEFAULT_MAX_QUEUE_AGE_S,
    DEFAULT_PROBE_TIMEOUT_S,
    Target,
    jobs_of,
    render,
    run_checks,
)

#: The key ``--aws`` uses when ``--api-key`` is not given (the SDK reads the same variable).
API_KEY_ENV = "OPSLAKE_API_KEY"


def schedule_periods(template_path: Path) -> dict[str, timedelta]:
    """Each scheduled function's period, from template.yaml (a cron's: the gap between two firings)."""
    from opslake_local.schedule import schedules
    from opslake_local.template import Template

    periods: dict[str, timedelta] = {}
    for schedule in schedules(Template(template_path)):
        expression = schedule.expression
        if expression.period is not None:
            period = expression.period
        else:
            start = datetime.now(UTC)
            first = expression.next_after(start, started=start)
            period = expression.next_after(first, started=start) - first
        periods[schedule.function] = min(period, periods.get(schedule.function, period))
    return periods


def dead_letter_queue(sqs: Any, queue_url: str) -> str:
    """The URL of the queue's DLQ, from its redrive policy."""
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["RedrivePolicy"])["Attributes"]
    if "RedrivePolicy" not in attributes:
        raise CliError(f"the ops queue {queue_url} has no dead-letter queue (no RedrivePolicy)")
    arn = json.loads(attributes["RedrivePolicy"])["deadLetterTargetArn"]
    return str(sqs.get_queue_url(QueueName=arn.rsplit(":", 1)[-1])["QueueUrl"])


def local_target(args: argparse.Namespace) -> Target:
    """The running local stack: its API, its key (or ``--api-key``), its moto clients."""
    import httpx

    from opslake.config import load_settings
    from opslake_local.template import Template

    state = require_stack(args)
    if not state.get("api_url"):
        raise CliError("the local stack's state file names no API (start it with `opslake local up`)", 2)
    settings = load_settings(state.get("environment", {}))
    template = Path(state["template"])
    sqs = local_client(state, "sqs")
    queue_url = settings.ops_queue_url
    started = state_path(template, args.state).stat().st_mtime  # `opslake local up` writes it at start
    return Target(
        where="local stack",
        local=True,
        stack_name=Template(template).stack_name,
        api=httpx.Client(base_url=state["api_url"], timeout=30),
        api_key=args.api_key or state.get("api_key"),
        s3=local_client(state, "s3"),
        sqs=sqs,
        cloudwatch=local_client(state, "cloudwatch"),
        bucket=str(state["bucket"]),
        queue_url=queue_url,
        dlq_url=dead_letter_queue(sqs, queue_url),
        jobs=jobs_of(settings, schedule_periods(template)),
        running_since=datetime.fromtimestamp(started, UTC),
    )


def aws_target(args: argparse.Namespace) -> Target:
    """The deployed stack ``--stack-name``: its outputs, the user's AWS configuration, and the API key
    of ``--api-key`` or $OPSLAKE_API_KEY. The jobs' schedules are read from the local template.yaml."""
    import httpx
    from botocore.exceptions import BotoCoreError, ClientError

    from opslake.config import Settings
    from opslake_local.template import TemplateError, find_template

    cfn = aws_client("cloudformation", args.region)
    try:
        stack = cfn.describe_stacks(StackName=args.stack_name)["Stacks"][0]
    except (BotoCoreError, ClientError) as exc:
        raise CliError(f"cannot describe stack {args.stack_name!r}: {exc}") from exc
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    missing = [
        n for n in ("ApiUrl", "LakeBucketName", "OpsQueueUrl", "OpsDeadLetterQueueUrl") if not outputs.get(n)
    ]
    if missing:
        raise CliError(
            f"stack {args.stack_name!r} has no {', '.join(missing)} output(s): is it an opslake stack?"
        )
    try:
        periods = schedule_periods(find_template(args.template))
    except TemplateError:
        periods = {}  # the jobs' ages are still shown, without a judgement against their schedule
    jobs = [
        replace(job, physical_name=_physical_name(cfn, args.stack_name, job.function))
        for job in jobs_of(Settings(), periods)
    ]
    return Target(
        where=f"stack {args.stack_name}",
        local=False,
        stack_name=args.stack_name,
        api=httpx.Client(base_url=outputs["ApiUrl"].rstrip("/") + "/", timeout=30),
        api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
        s3=aws_client("s3", args.region),
        sqs=aws_client("sqs", args.region),
        cloudwatch=aws_client("cloudwatch", args.region),
        bucket=outputs["LakeBucketName"],
        queue_url=outputs["OpsQueueUrl"],
        dlq_url=outputs["OpsDeadLetterQueueUrl"],
        jobs=jobs,
        running_since=stack.get("CreationTime"),  # an update does not stop the schedules
    )


def _physical_name(cfn: Any, stack_name: str, logical_id: str) -> str | None:
    """The deployed name of a stack's resource, for the commands the doctor prints (None: unknown)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        found = cfn.describe_stack_resource(StackName=stack_name, LogicalResourceId=logical_id)
    except (BotoCoreError, ClientError):
        return None
    return str(found["StackResourceDetail"]["PhysicalResourceId"])


def _only(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(CHECK_NAMES))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown check(s) {', '.join(unknown)}; choose from {', '.join(CHECK_NAMES)}"
        )
    return names


def cmd_doctor(args: argparse.Namespace) -> int:
    target = aws_target(args) if args.aws else local_target(args)
    with target.api:
        if not args.json:
            print(f"opslake doctor: {target.where} ({target.api.base_url})", flush=True)
        checks = run_checks(
            target,
            only=args.only or CHECK_NAMES,
            timeout_s=args.timeout
            if args.timeout is not None
            else (DEFAULT_PROBE_TIMEOUT_S if target.local else DEFAULT_AWS_PROBE_TIMEOUT_S),
            poll_s=1.0 if target.local else 5.0,  # each Athena query bills 10 MB at least
            max_queue_age_s=args.max_queue_age,
        )
    print(render(checks, as_json=args.json))
    return 1 if any(c.status == "FAIL" for c in checks) else 0


def add_doctor(commands: Commands) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="check a stack end to end: key, probe op, queue and DLQ, jobs, alarms, model (local, or --aws)",
        description="Each check prints ok, warn or FAIL with what to do; the exit code is 1 when any failed.",
    )
    doctor.add_argument(
        "--api-key",
        default=None,
        help=f"the key to probe with (default: the local stack's, or ${API_KEY_ENV} with --aws)",
    )
    doctor.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds the probe op may take to become queryable (default "
        f"{DEFAULT_PROBE_TIMEOUT_S:g}, with --aws {DEFAULT_AWS_PROBE_TIMEOUT_S:g}: the writer batches up to a minute)",
    )
    doctor.add_argument(
        "--max-queue-age",
        type=float,
        default=DEFAULT_MAX_QUEUE_AGE_S,
        help=f"seconds the ops queue's oldest message may wait (default {DEFAULT_MAX_QUEUE_AGE_S:g})",
    )
    doctor.add_argument(
        "--only", type=_only, default=None, help=f"comma-separated checks to run ({', '.join(CHECK_NAMES)})"
    )
    doctor.add_argument("--json", action="store_true", help="the checks as JSON")
    aws_options(doctor, "API, queues, jobs and alarms")
    doctor.set_defaults(func=cmd_doctor)
