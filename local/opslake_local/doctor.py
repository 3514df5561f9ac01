"""``opslake doctor``: is a stack working? Each check asks the stack one question the way a user
or an operator would, and answers ok, warn or FAIL with what to do about a failure.

The checks take a :class:`Target` (an HTTP client on the stack's API, its key, boto3 clients and
the names of its bucket, queues and alarms) so the same checks run on the local stack and on a
deployed one (``opslake doctor --aws``); the judgements (``judge_*``) are pure functions of what
was read, so they are tested without a stack.

Checks, in order: the API key (accepted, and a request without one refused); the probe (an op sent
to POST /events becomes queryable through POST /sql within a timeout); the ops queue (oldest
message age) and its DLQ (empty); the last committed run of each scheduled job (its state object in
the lake); the CloudWatch alarms of the stack (none in ALARM); the model (GET /model: configured,
reachable, circuit breaker not open).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # the CLI imports this module for every command: its imports wait for `doctor`
    import httpx

    from opslake.config import Settings
    from opslake.jobs.lease import RunState

Status = Literal["ok", "warn", "FAIL"]
#: The ops queue's oldest message may be this old before the check fails: the writer drains within
#: seconds, so minutes of age mean it is failing, throttled or behind.
DEFAULT_MAX_QUEUE_AGE_S = 300.0
#: How long the probe may take from POST /events to a row in POST /sql: locally the drainer polls
#: every second; deployed, the writer's event source waits up to its batching window (60 s in
#: template.yaml) to fill a batch, and each poll is an Athena query of a few seconds.
DEFAULT_PROBE_TIMEOUT_S = 30.0
DEFAULT_AWS_PROBE_TIMEOUT_S = 180.0
#: A job whose last committed run is older than this many schedule periods has stopped succeeding.
STALE_PERIODS = 2
#: The endpoint of the probe op, so a reader of the lake can tell it (and filter it) from real work.
PROBE_ENDPOINT = "opslake:doctor"
#: Its event_kind: one of opslake.insights.stats.REPORT_EVENT_KINDS (tests/unit/local/test_doctor.py),
#: so /stats and /profile count it as a report, never as a tool call.
PROBE_EVENT_KIND = "probe"
CHECK_NAMES = ("api-key", "probe", "queue", "dlq", "jobs", "alarms", "model")


@dataclass(frozen=True)
class Check:
    """One line of the doctor's answer: a status, what was checked, what was found, what to do."""

    status: Status
    name: str
    detail: str
    fix: str | None = None

    def line(self, width: int = 20) -> str:
        text = f"{self.status:<4}  {self.name:<{width}}  {self.detail}"
        return text + (f"\n      -> {self.fix}" if self.fix else "")


@dataclass(frozen=True)
class Job:
    """A scheduled job as the doctor sees it: its name, its function and its run state object."""

    name: str
    function: str
    state_key: str
    period: timedelta | None  # from the template's schedule (None: not known)
    physical_name: str | None = None  # the deployed function's name (None: local, or not found)


@dataclass
class Target:
    """What the checks act on: the local stack (``local``) or a deployed one."""

    where: str  # "local stack" or "stack NAME": what the lines say
    local: bool
    stack_name: str
    api: httpx.Client  # base_url: the stack's API
    api_key: str | None
    s3: Any
    sqs: Any
    cloudwatch: Any
    bucket: str
    queue_url: str
    dlq_url: str
    jobs: Sequence[Job]
    #: Since when the stack's schedules run (deployed: its creation; local: `opslake local up`'s
    #: start): before two periods have passed, a job that has not run yet is only a warning.
    running_since: datetime | None = None
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    # -- what to tell the user, local or deployed ---------------------------------------------
    def logs_of(self, function: str) -> str:
        if self.local:
            return "the log of `opslake local up` (it runs the functions in its process)"
        return f"`sam logs --stack-name {self.stack_name} -n {function}`"

    def sqs_command(self, verb: str, url: str) -> str:
        endpoint = f" --endpoint-url {self.sqs.meta.endpoint_url}" if self.local else ""
        return f"`aws{endpoint} sqs {verb} --queue-url {url}`"


def jobs_of(settings: Settings, periods: Mapping[str, timedelta]) -> list[Job]:
    """The scheduled jobs whose run state the doctor reads; ``periods`` by function logical id."""
    return [
        Job("analyzer", "AnalyzerFunction", settings.analyzer_state_key, periods.get("AnalyzerFunction")),
        Job(
            "consolidator",
            "ConsolidatorFunction",
            settings.consolidator_state_key,
            periods.get("ConsolidatorFunction"),
        ),
    ]


# ---- the API key and the probe --------------------------------------------------------------------
def _headers(key: str | None) -> dict[str, str]:
    return {"x-api-key": key} if key else {}


def _probe_op(op_id: str) -> dict[str, Any]:
    return {
        "op_id": op_id,
        "endpoint": PROBE_ENDPOINT,
        "success": True,
        "duration_ms": 0,
        "agent_id": "doctor",
        # a report, not a call: /stats and /profile keep it out of the tool figures
        "event_kind": PROBE_EVENT_KIND,
    }


def judge_api_key(with_key: int | None, without_key: int, *, has_key: bool) -> Check:
    """From the statuses POST /events answered with the key (None: no key to try) and without."""
    name = "api-key"
    if without_key < 400:
        return Check(
            "FAIL",
            name,
            f"POST /events without a key answered {without_key}: anyone can write to this lake",
            "require API keys on every route (ApiKeyRequired in template.yaml's Auth) and redeploy",
        )
    if not has_key or with_key is None:
        return Check(
            "FAIL",
            name,
            "no API key to check (and the probe cannot be sent)",
            "pass --api-key or set OPSLAKE_API_KEY (create one with `opslake keys create NAME --aws`)",
        )
    if with_key in (401, 403):
        return Check(
            "FAIL",
            name,
            f"the API key is refused ({with_key}); a request without one is refused too ({without_key})",
            "check the key's value, that it is enabled and bound to the stack's usage plan "
            "(`opslake keys list`), or create one with `opslake keys create NAME`",
        )
    if with_key >= 400:
        return Check("FAIL", name, f"POST /events with the key answered {with_key}", "see the answer's body")
    return Check("ok", name, f"accepted ({with_key}); a request without a key is refused ({without_key})")


def check_api_key(target: Target, op_id: str) -> tuple[Check, str | None]:
    """Send the probe op with the key (and an op without a key, which must be refused). Returns the
    check and the op id the stack accepted (None when it accepted none)."""
    import httpx

    from opslake.models.ids import new_ulid

    try:
        bare = target.api.post("/events", json=_probe_op(new_ulid()))
        answer = (
            target.api.post("/events", json=_probe_op(op_id), headers=_headers(target.api_key))
            if target.api_key
            else None
        )
    except httpx.HTTPError as exc:
        return (
            Check(
                "FAIL",
                "api-key",
                f"the API at {target.api.base_url} does not answer: {exc}",
                "is the stack up? (`opslake local up`, or the stack's ApiUrl output)",
            ),
            None,
        )
    check = judge_api_key(
        answer.status_code if answer else None, bare.status_code, has_key=bool(target.api_key)
    )
    accepted: str | None = None
    if answer is not None and answer.status_code < 300:
        ids = (answer.json() or {}).get("accepted") or []
        accepted = str(ids[0]) if ids else None
    return check, accepted


def probe_sql(op_id: str, now: datetime) -> str:
    """The query that finds the probe: its partition (ingested today, or yesterday just before
    midnight) bounds what Athena scans."""
    since = (now - timedelta(days=1)).strftime("%Y-%m-%d")
    quoted = op_id.replace("'", "''")
    return f"SELECT op_id FROM ops WHERE dt >= '{since}' AND op_id = '{quoted}'"


def check_probe(
    target: Target,
    op_id: str | None,
    *,
    timeout_s: float,
    poll_s: float,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> Check:
    """Wait until the probe op is a row of POST /sql, at most ``timeout_s``."""
    import httpx

    name = "probe"
    if op_id is None:
        return Check("FAIL", name, "no probe was accepted (see api-key)", "fix the API key first")
    started = monotonic()
    last = ""
    while True:
        try:
            answer = target.api.post(
                "/sql",
                json={"sql": probe_sql(op_id, target.clock()), "limit": 1},
                headers=_headers(target.api_key),
            )
            if answer.status_code == 200 and answer.json().get("row_count"):
                return Check("ok", name, f"op {op_id} queryable after {monotonic() - started:.1f} s")
            last = (
                ""
                if answer.status_code == 200
                else f"; POST /sql answered {answer.status_code}: {answer.text[:200]}"
            )
        except httpx.HTTPError as exc:
            last = f"; POST /sql failed: {exc}"
        if monotonic() - started >= timeout_s:
            break
        sleep(poll_s)
    depth = queue_depth(target.sqs, target.queue_url)
    where = (
        f"the ops queue holds {depth[0]} message(s) ({depth[1]} in flight): the writer is not draining it"
        if depth[0] + depth[1]
        else "the ops queue is empty: the writer took the op but it is not in the lake (or not queryable)"
    )
    return Check(
        "FAIL",
        name,
        f"op {op_id} accepted but not queryable after {timeout_s:g} s; {where}{last}",
        f"see the WriterFunction's errors in {target.logs_of('WriterFunction')}, and the dlq check; "
        "--timeout waits longer",
    )


# ---- the queue and the DLQ ------------------------------------------------------------------------
def queue_depth(sqs: Any, url: str) -> tuple[int, int]:
    """(visible, in flight) messages of a queue."""
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes.get("ApproximateNumberOfMessages", 0)), int(
        attributes.get("ApproximateNumberOfMessagesNotVisible", 0)
    )


def oldest_message_age_s(cloudwatch: Any, queue_url: str, now: datetime) -> float | None:
    """The queue's ApproximateAgeOfOldestMessage over the last 15 minutes (None: no datapoint)."""
    stats = cloudwatch.get_metric_statistics(
        Namespace="AWS/SQS",
        MetricName="ApproximateAgeOfOldestMessage",
        Dimensions=[{"Name": "QueueName", "Value": queue_url.rstrip("/").rsplit("/", 1)[-1]}],
        StartTime=now - timedelta(minutes=15),
        EndTime=now,
        Period=60,
        Statistics=["Maximum"],
    )
    points = sorted(stats.get("Datapoints", []), key=lambda p: p["Timestamp"])
    return float(points[-1]["Maximum"]) if points else None


def judge_queue(visible: int, in_flight: int, age_s: float | None, *, max_age_s: float, local: bool) -> Check:
    name = "queue"
    depth = f"{visible} message(s) waiting, {in_flight} in flight"
    if age_s is None:
        why = "not measured locally" if local else "no CloudWatch datapoint in the last 15 min"
        return Check("ok", name, f"{depth}; oldest message age {why}")
    if age_s > max_age_s:
        return Check(
            "FAIL",
            name,
            f"{depth}; the oldest message is {age_s:.0f} s old (more than {max_age_s:g} s)",
            "the writer is failing, throttled or behind: see WriterFunction's errors and throttles "
            "and the dlq check",
        )
    return Check("ok", name, f"{depth}; oldest message {age_s:.0f} s old")


def check_queue(target: Target, *, max_age_s: float) -> Check:
    visible, in_flight = queue_depth(target.sqs, target.queue_url)
    age = None if target.local else oldest_message_age_s(target.cloudwatch, target.queue_url, target.clock())
    return judge_queue(visible, in_flight, age, max_age_s=max_age_s, local=target.local)


def judge_dlq(visible: int, in_flight: int, *, receive: str, redrive: str) -> Check:
    held = visible + in_flight
    if not held:
        return Check("ok", "dlq", "empty")
    return Check(
        "FAIL",
        "dlq",
        f"the DLQ holds {held} message(s): op records the writer failed to store five times",
        f"inspect them with {receive}; once the cause is fixed, {redrive}",
    )


def check_dlq(target: Target) -> Check:
    visible, in_flight = queue_depth(target.sqs, target.dlq_url)
    if target.local:  # moto has no message move task: the bodies go back by hand
        redrive = (
            f"send their bodies to the ops queue again ({target.sqs_command('send-message', target.queue_url)} "
            f"with --message-body), or drop them with {target.sqs_command('purge-queue', target.dlq_url)}"
        )
    else:
        arn = target.sqs.get_queue_attributes(QueueUrl=target.dlq_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        redrive = f"move them back with `aws sqs start-message-move-task --source-arn {arn}`"
    return judge_dlq(
        visible,
        in_flight,
        receive=target.sqs_command(
            "receive-message --attribute-names All --max-number-of-messages 10", target.dlq_url
        ),
        redrive=redrive,
    )


# ---- the scheduled jobs ---------------------------------------------------------------------------
def _ago(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    return f"{seconds / 3600:.1f} h ago"


def _every(period: timedelta) -> str:
    minutes = period.total_seconds() / 60
    return f"every {minutes:g} min" if minutes < 120 else f"every {minutes / 60:g} h"


def judge_job(
    job: Job,
    state: RunState | None,
    now: datetime,
    *,
    running_since: datetime | None,
    logs: str,
    run_now: str,
) -> Check:
    """A job's last committed run against its schedule: older than :data:`STALE_PERIODS` periods, or
    none at all, is a failure, except on a stack whose schedule started less than that long ago (its
    next run is still to come: a warning). A lease still held after it expired is a run that crashed."""
    name = f"job:{job.name}"
    period = job.period
    limit = period * STALE_PERIODS if period else None
    every = f" (it runs {_every(period)})" if period else ""
    crashed = ""
    if state is not None and state.lease_holder and state.lease_expires and state.lease_expires < now:
        expired = _ago(now - state.lease_expires)
        crashed = (
            f"; a run took the lease and never gave it back (expired {expired}): it crashed or timed out"
        )
    running = ""
    if state is not None and state.lease_holder and state.lease_expires and state.lease_expires >= now:
        running = "; a run is under way"
    started = f"; the stack started {_ago(now - running_since)}" if running_since is not None else ""
    young = running_since is not None and limit is not None and now - running_since < limit
    last = (state.committed_at or state.watermark) if state is not None else None
    if last is None:
        # without the stack's age or the schedule, never having run accuses nothing yet
        judged = running_since is not None and limit is not None and not young
        return Check(
            "FAIL" if judged else "warn",
            name,
            f"never completed a run{every}{started}{crashed}",
            f"run it now with {run_now}; if it fails, see {logs}",
        )
    age = now - last
    detail = f"last run committed {_ago(age)}{every}{running}{crashed}"
    if limit is not None and age > limit:
        if young:  # e.g. a local stack restarted from its data: the schedule has only begun again
            return Check("warn", name, detail + f"{started}: its next scheduled run is still to come")
        return Check(
            "FAIL",
            name,
            detail + f": more than {STALE_PERIODS} periods without a successful run",
            f"see its errors in {logs}; run it once with {run_now}",
        )
    if crashed:
        return Check("warn", name, detail, f"see {logs} for the run that crashed")
    return Check("ok", name, detail)


def read_run_state(s3: Any, bucket: str, key: str) -> RunState | None:
    from opslake.jobs.lease import RunState

    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None
    return RunState.from_json(body)


def check_jobs(target: Target) -> list[Check]:
    checks = []
    now = target.clock()
    for job in target.jobs:
        try:
            state = read_run_state(target.s3, target.bucket, job.state_key)
        except Exception as exc:  # unreadable or not a run state: that itself is the finding
            checks.append(
                Check(
                    "FAIL",
                    f"job:{job.name}",
                    f"cannot read s3://{target.bucket}/{job.state_key}: {exc}",
                    "check the lake bucket and the caller's s3:GetObject permission on state/*",
                )
            )
            continue
        function = job.physical_name or f"<the deployed {job.function}>"
        run_now = (
            f"`opslake schedule run {job.function}`"
            if target.local
            else f"`aws lambda invoke --function-name {function} out.json`"
        )
        checks.append(
            judge_job(
                job,
                state,
                now,
                running_since=target.running_since,
                logs=target.logs_of(job.function),
                run_now=run_now,
            )
        )
    return checks


# ---- alarms ---------------------------------------------------------------------------------------
def judge_alarms(alarms: Iterable[Mapping[str, Any]], *, prefix: str, local: bool) -> Check:
    """The stack's alarms (``describe_alarms`` items): any in ALARM fails, naming them and why."""
    alarms = list(alarms)
    if not alarms:
        if local:
            return Check(
                "ok",
                "alarms",
                "the local stack deploys no CloudWatch alarms (`--aws` checks the deployed ones)",
            )
        return Check(
            "warn",
            "alarms",
            f"no CloudWatch alarm named {prefix}*: nothing watches this stack",
            "deploy a template.yaml that declares the alarms (and set AlarmTopicArn to be notified)",
        )
    firing = [a for a in alarms if a.get("StateValue") == "ALARM"]
    if firing:
        names = "; ".join(f"{a['AlarmName']} ({a.get('StateReason', '')[:120]})" for a in firing)
        return Check(
            "FAIL",
            "alarms",
            f"{len(firing)} of {len(alarms)} alarm(s) in ALARM: {names}",
            "each alarm's description says what it watches; fix the cause and the alarm returns to OK "
            "at its next evaluation",
        )
    unknown = sum(1 for a in alarms if a.get("StateValue") == "INSUFFICIENT_DATA")
    return Check(
        "ok",
        "alarms",
        f"{len(alarms)} alarm(s), none in ALARM" + (f" ({unknown} without data yet)" if unknown else ""),
    )


def check_alarms(target: Target) -> Check:
    prefix = f"{target.stack_name}-"
    alarms: list[dict[str, Any]] = []
    for page in target.cloudwatch.get_paginator("describe_alarms").paginate(AlarmNamePrefix=prefix):
        alarms.extend(page.get("MetricAlarms", []))
        alarms.extend(page.get("CompositeAlarms", []))
    return judge_alarms(alarms, prefix=prefix, local=target.local)


# ---- the model ------------------------------------------------------------------------------------
def judge_model(answer: Mapping[str, Any]) -> Check:
    """From GET /model's answer: configured, reachable, and the circuit breaker not open."""
    name = "model"
    if not answer.get("configured"):
        return Check(
            "warn",
            name,
            "no model configured: the analyzer diagnoses with its heuristics and the consolidator "
            "drafts without a model (fallbacks)",
            "set the LlmBaseUrl, LlmModel and LlmApiKeyParameter parameters to use one",
        )
    model = answer.get("model") or "?"
    breaker = answer.get("circuit_breaker")
    if breaker == "open":
        rate = answer.get("recent_error_rate")
        return Check(
            "FAIL",
            name,
            f"the circuit breaker of {model} is open"
            + (f" (recent error rate {rate:.0%})" if isinstance(rate, int | float) else "")
            + ": every diagnosis falls back to the heuristics",
            "check the endpoint, the key in its parameter and the provider's quota; the breaker tries "
            "one call after its cooldown (OPSLAKE_LLM_BREAKER_COOLDOWN_S)",
        )
    if answer.get("reachable") is False:
        return Check(
            "FAIL",
            name,
            f"the endpoint of {model} does not answer (GET <base url>/models failed or answered 5xx)",
            "check LlmBaseUrl, the network path from Lambda to it, and the provider's status",
        )
    detail = f"{model} reachable, circuit breaker {breaker or 'never used'}"
    if breaker == "half_open":
        return Check("warn", name, detail + ": it is trying one call after failures")
    return Check("ok", name, detail)


def check_model(target: Target) -> Check:
    import httpx

    try:
        answer = target.api.get("/model", headers=_headers(target.api_key))
    except httpx.HTTPError as exc:
        return Check("FAIL", "model", f"GET /model failed: {exc}", "is the API up? (see api-key)")
    if answer.status_code != 200:
        return Check(
            "FAIL", "model", f"GET /model answered {answer.status_code}: {answer.text[:200]}", "see api-key"
        )
    return judge_model(answer.json())


# ---- all of them ----------------------------------------------------------------------------------
def run_checks(
    target: Target,
    *,
    only: Iterable[str] = CHECK_NAMES,
    timeout_s: float = DEFAULT_PROBE_TIMEOUT_S,
    poll_s: float = 1.0,
    max_queue_age_s: float = DEFAULT_MAX_QUEUE_AGE_S,
) -> list[Check]:
    """Every selected check, in order; a check that raises is a FAIL naming the error, and the
    others still run."""
    from opslake.models.ids import new_ulid

    wanted = set(only)
    checks: list[Check] = []

    def guarded(name: str, run: Callable[[], Check | list[Check]]) -> None:
        if name not in wanted:
            return
        try:
            found = run()
        except Exception as exc:
            found = Check("FAIL", name, f"the check itself failed: {type(exc).__name__}: {exc}")
        checks.extend(found if isinstance(found, list) else [found])

    op_id = new_ulid()
    accepted: str | None = None
    if wanted & {"api-key", "probe"}:  # the probe is the op the key check sends
        try:
            key_check, accepted = check_api_key(target, op_id)
        except Exception as exc:
            key_check = Check("FAIL", "api-key", f"the check itself failed: {type(exc).__name__}: {exc}")
        if "api-key" in wanted:
            checks.append(key_check)
    guarded("probe", lambda: check_probe(target, accepted, timeout_s=timeout_s, poll_s=poll_s))
    guarded("queue", lambda: check_queue(target, max_age_s=max_queue_age_s))
    guarded("dlq", lambda: check_dlq(target))
    guarded("jobs", lambda: check_jobs(target))
    guarded("alarms", lambda: check_alarms(target))
    guarded("model", lambda: check_model(target))
    return checks


def render(checks: Sequence[Check], *, as_json: bool = False) -> str:
    if as_json:
        return json.dumps([asdict(c) for c in checks], indent=2)
    width = max((len(c.name) for c in checks), default=0)
    failed = sum(1 for c in checks if c.status == "FAIL")
    warned = sum(1 for c in checks if c.status == "warn")
    summary = f"{failed} failed, {warned} warning(s), {len(checks) - failed - warned} ok"
    return "\n".join([*(c.line(width) for c in checks), summary])
