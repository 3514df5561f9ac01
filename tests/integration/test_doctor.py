"""``opslake doctor`` against a running local stack: green on a healthy one (after the jobs ran once),
and red with the right message for each injected fault."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from opslake.config import load_settings
from opslake.jobs.lease import RunState
from opslake_local.cli import main
from opslake_local.drain import BackgroundDrainer, Drainer
from opslake_local.http import LocalApi
from opslake_local.stack import QUIET_ENV, LocalStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@dataclass
class Running:
    stack: LocalStack
    state: Path
    drainer: BackgroundDrainer | None

    def cli(self, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["--state", str(self.state), *argv])
        out, err = capsys.readouterr()
        return code, out, err

    def doctor(self, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, dict[str, Any]]]:
        """The doctor's exit code and its checks by name (from --json)."""
        code, out, err = self.cli(capsys, "doctor", "--json", "--timeout", "20", *argv)
        assert code in (0, 1), err
        return code, {c["name"]: c for c in json.loads(out)}

    def started(self, ago: timedelta) -> None:
        """Make the stack look started ``ago`` (the doctor takes its state file's time for it)."""
        at = (datetime.now(UTC) - ago).timestamp()
        os.utime(self.state, (at, at))

    def start_drainer(self) -> None:
        if self.drainer is None:
            self.drainer = BackgroundDrainer(
                Drainer(self.stack, self.stack.invoker()), interval_s=0.2
            ).start()

    def stop_drainer(self) -> None:
        if self.drainer is not None:
            self.drainer.stop()
            self.drainer = None

    @property
    def settings(self) -> Any:
        return load_settings(self.stack.environment)


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    state = tmp_path_factory.mktemp("doctor") / "local.json"
    # the jobs read up to now (no settling delay); GET /model reads the LLM state anew at each call
    overrides = {**QUIET_ENV, "OPSLAKE_ANALYZER_SETTLE_S": "0", "OPSLAKE_SNAPSHOT_CACHE_S": "0"}
    with LocalStack(env_overrides=overrides) as stack:
        api = LocalApi(stack, stack.invoker(), key_max_age_s=0)
        base_url = api.start()
        state.write_text(json.dumps({"api_url": base_url, **stack.describe(), "pid": os.getpid()}))
        running = Running(stack, state, None)
        running.started(timedelta(hours=1))  # long enough for every job to have run twice
        running.start_drainer()
        try:
            yield running
        finally:
            running.stop_drainer()
            api.stop()


@pytest.fixture
def healthy(running: Running, capsys: pytest.CaptureFixture[str]) -> Iterator[Running]:
    """The stack with its drainer running and both jobs run once; each test puts back what it broke."""
    running.start_drainer()
    for function in ("AnalyzerFunction", "ConsolidatorFunction"):
        code, _, err = running.cli(capsys, "schedule", "run", function)
        assert code == 0, err
    yield running
    running.start_drainer()


def _statuses(checks: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {name: c["status"] for name, c in checks.items()}


def test_a_fresh_stack_warns_that_the_jobs_never_ran(
    running: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    s3 = running.stack.client("s3")
    for key in (running.settings.analyzer_state_key, running.settings.consolidator_state_key):
        s3.delete_object(Bucket=running.stack.bucket, Key=key)
    running.started(timedelta(minutes=2))
    try:
        code, checks = running.doctor(capsys, "--only", "jobs")
    finally:
        running.started(timedelta(hours=1))
    assert code == 0
    for job in ("analyzer", "consolidator"):
        check = checks[f"job:{job}"]
        assert check["status"] == "warn" and "never completed a run" in check["detail"]
        assert f"opslake schedule run {job.capitalize()}Function" in check["fix"]

    # the same stack an hour after it started: its jobs should have run by now
    code, checks = running.doctor(capsys, "--only", "jobs")
    assert code == 1
    assert (
        checks["job:analyzer"]["status"] == "FAIL"
        and "the stack started 60 min ago" in checks["job:analyzer"]["detail"]
    )


def test_a_healthy_stack_is_green(healthy: Running, capsys: pytest.CaptureFixture[str]) -> None:
    code, checks = healthy.doctor(capsys)
    assert code == 0, checks
    assert _statuses(checks) == {
        "api-key": "ok",
        "probe": "ok",
        "queue": "ok",
        "dlq": "ok",
        "job:analyzer": "ok",
        "job:consolidator": "ok",
        "alarms": "ok",
        "model": "warn",  # the local stack has no model configured: its fallbacks are used
    }
    assert "queryable after" in checks["probe"]["detail"]
    assert "every 5 min" in checks["job:analyzer"]["detail"]
    assert "every 30 min" in checks["job:consolidator"]["detail"]
    assert "no model configured" in checks["model"]["detail"]

    # The text form: one line per check and the fix of none (nothing failed), then the counts.
    code, out, _ = healthy.cli(capsys, "doctor", "--timeout", "20")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("opslake doctor: local stack")
    assert [line.split()[:2] for line in lines[1:3]] == [["ok", "api-key"], ["ok", "probe"]]
    assert lines[-1] == "0 failed, 1 warning(s), 7 ok"


def test_the_probe_is_in_the_lake_under_the_op_id_the_stack_accepted(
    healthy: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    _, checks = healthy.doctor(capsys, "--only", "probe")
    op_id = checks["probe"]["detail"].split()[1]
    with httpx.Client(base_url=json.loads(healthy.state.read_text())["api_url"]) as api:
        answer = api.post(
            "/sql",
            json={"sql": f"SELECT endpoint, success FROM ops WHERE op_id = '{op_id}'"},
            headers={"x-api-key": healthy.stack.api_key.value},  # type: ignore[union-attr]
        )
    assert answer.json()["rows"] == [["opslake:doctor", True]]


def test_a_wrong_api_key_fails(healthy: Running, capsys: pytest.CaptureFixture[str]) -> None:
    code, checks = healthy.doctor(capsys, "--api-key", "not-a-key-of-this-stack")
    assert code == 1
    assert (
        checks["api-key"]["status"] == "FAIL"
        and "the API key is refused (403)" in checks["api-key"]["detail"]
    )
    assert "opslake keys" in checks["api-key"]["fix"]
    assert checks["probe"]["status"] == "FAIL" and "no probe was accepted" in checks["probe"]["detail"]
    assert checks["model"]["status"] == "FAIL" and "403" in checks["model"]["detail"]


def test_a_message_on_the_dlq_fails(healthy: Running, capsys: pytest.CaptureFixture[str]) -> None:
    sqs = healthy.stack.client("sqs")
    dlq = healthy.stack.queue_url("OpsDeadLetterQueue")
    sqs.send_message(QueueUrl=dlq, MessageBody='{"op_id": "lost"}')
    try:
        code, checks = healthy.doctor(capsys, "--only", "dlq,queue")
    finally:
        sqs.purge_queue(QueueUrl=dlq)
    assert code == 1
    dlq_check = checks["dlq"]
    assert dlq_check["status"] == "FAIL" and "the DLQ holds 1 message(s)" in dlq_check["detail"]
    assert "receive-message" in dlq_check["fix"] and dlq in dlq_check["fix"]
    # moto moves no messages back: the fix says how to resend them to the ops queue, or drop them
    assert "send-message --queue-url " + healthy.stack.queue_url("OpsQueue") in dlq_check["fix"]
    assert "purge-queue --queue-url " + dlq in dlq_check["fix"]
    assert checks["queue"]["status"] == "ok"


def test_a_probe_the_writer_never_drains_fails(healthy: Running, capsys: pytest.CaptureFixture[str]) -> None:
    healthy.stop_drainer()
    code, out, _ = healthy.cli(capsys, "doctor", "--only", "probe,queue", "--timeout", "2")
    healthy.start_drainer()
    assert code == 1
    probe = next(line for line in out.splitlines() if line.startswith("FAIL  probe"))
    # the probe, and the records of the API's own calls (each POST /sql is an op too), wait there
    assert "not queryable after 2 s" in probe and re.search(
        r"the ops queue holds [1-9]\d* message\(s\)", probe
    )
    assert "the writer is not draining it" in probe
    assert "WriterFunction" in out.split(probe, 1)[1].splitlines()[1]  # the fix, on the next line


def test_a_probe_the_lake_refuses_fails(healthy: Running, capsys: pytest.CaptureFixture[str]) -> None:
    """A lake bucket that refuses the writer's objects: the probe never becomes queryable."""
    s3 = healthy.stack.client("s3")
    bucket = healthy.stack.bucket
    before = s3.get_bucket_policy(Bucket=bucket)["Policy"] if _has_policy(s3, bucket) else None
    deny = {
        "Sid": "DoctorTestDenyOps",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:PutObject",
        "Resource": f"arn:aws:s3:::{bucket}/ops/*",
    }
    policy = json.loads(before) if before else {"Version": "2012-10-17", "Statement": []}
    policy["Statement"].append(deny)
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
    try:
        code, checks = healthy.doctor(capsys, "--only", "probe", "--timeout", "3")
    finally:
        if before:
            s3.put_bucket_policy(Bucket=bucket, Policy=before)
        else:
            s3.delete_bucket_policy(Bucket=bucket)
    assert code == 1
    assert checks["probe"]["status"] == "FAIL" and "not queryable after 3 s" in checks["probe"]["detail"]


def _has_policy(s3: Any, bucket: str) -> bool:
    try:
        s3.get_bucket_policy(Bucket=bucket)
    except s3.exceptions.ClientError:
        return False
    return True


def _put_run_state(running: Running, key: str, state: RunState) -> None:
    running.stack.client("s3").put_object(Bucket=running.stack.bucket, Key=key, Body=state.to_json())


def test_a_job_whose_last_run_is_too_old_fails(healthy: Running, capsys: pytest.CaptureFixture[str]) -> None:
    long_ago = datetime.now(UTC) - timedelta(minutes=25)
    _put_run_state(
        healthy, healthy.settings.analyzer_state_key, RunState(watermark=long_ago, committed_at=long_ago)
    )
    code, checks = healthy.doctor(capsys, "--only", "jobs")
    assert code == 1
    analyzer = checks["job:analyzer"]
    assert analyzer["status"] == "FAIL"
    assert "last run committed 25 min ago (it runs every 5 min)" in analyzer["detail"]
    assert "more than 2 periods without a successful run" in analyzer["detail"]
    assert "opslake schedule run AnalyzerFunction" in analyzer["fix"]
    assert checks["job:consolidator"]["status"] == "ok"  # 25 min is less than one of its periods


def test_a_job_whose_run_crashed_fails(healthy: Running, capsys: pytest.CaptureFixture[str]) -> None:
    """A run that took the lease and died: the lease expired unreleased, and no commit since."""
    now = datetime.now(UTC)
    crashed = RunState(
        watermark=now - timedelta(hours=3),
        committed_at=now - timedelta(hours=3),
        lease_holder="01CRASHEDRUN",
        lease_expires=now - timedelta(minutes=20),
    )
    _put_run_state(healthy, healthy.settings.consolidator_state_key, crashed)
    code, checks = healthy.doctor(capsys, "--only", "jobs")
    assert code == 1
    consolidator = checks["job:consolidator"]
    assert consolidator["status"] == "FAIL" and "last run committed 3.0 h ago" in consolidator["detail"]
    assert "never gave it back (expired 20 min ago): it crashed or timed out" in consolidator["detail"]

    # the next successful run clears it
    assert healthy.cli(capsys, "schedule", "run", "ConsolidatorFunction")[0] == 0
    code, checks = healthy.doctor(capsys, "--only", "jobs")
    assert code == 0 and checks["job:consolidator"]["status"] == "ok"


def test_an_alarm_in_alarm_state_fails(healthy: Running, capsys: pytest.CaptureFixture[str]) -> None:
    cloudwatch = healthy.stack.client("cloudwatch")
    name = f"{healthy.stack.template.stack_name}-OpsDeadLetterQueueNotEmpty"
    cloudwatch.put_metric_alarm(
        AlarmName=name,
        Namespace="AWS/SQS",
        MetricName="ApproximateNumberOfMessagesVisible",
        Statistic="Maximum",
        Period=60,
        EvaluationPeriods=1,
        Threshold=0,
        ComparisonOperator="GreaterThanThreshold",
    )
    cloudwatch.set_alarm_state(AlarmName=name, StateValue="ALARM", StateReason="1 message on the DLQ")
    try:
        code, checks = healthy.doctor(capsys, "--only", "alarms")
        assert code == 1
        alarms = checks["alarms"]
        assert (
            alarms["status"] == "FAIL"
            and name in alarms["detail"]
            and "1 message on the DLQ" in alarms["detail"]
        )
        cloudwatch.set_alarm_state(AlarmName=name, StateValue="OK", StateReason="back to normal")
        code, checks = healthy.doctor(capsys, "--only", "alarms")
        assert code == 0 and checks["alarms"]["detail"] == "1 alarm(s), none in ALARM"
    finally:
        cloudwatch.delete_alarms(AlarmNames=[name])


def test_no_running_stack_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--state", str(tmp_path / "missing.json"), "doctor"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "no local stack is running" in err and "opslake local up" in err


def test_an_unknown_check_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["doctor", "--only", "dlq,nope"])
    assert exit_.value.code == 2
    assert (
        "unknown check(s) nope; choose from api-key, probe, queue, dlq, jobs, alarms, model"
        in capsys.readouterr().err
    )
