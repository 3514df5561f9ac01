"""issue 12: a restart of the local stack loses nothing. With a data directory (what
``opslake local up`` uses: ``.opslake/data/``), the lake (objects and Glue partitions, a compacted
hour's location too), the queue (messages not yet written, their send time and receive count) and
the API keys (values, names, revocations) come back after a stop, and after a crash (the last
checkpoint). Two stacks never share one directory."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from opslake.config import load_settings
from opslake.query.embedded import EmbeddedEngine
from opslake_local.cli import main
from opslake_local.drain import Drainer
from opslake_local.http import LocalApi
from opslake_local.persist import MANIFEST, PersistenceError
from opslake_local.stack import QUIET_ENV, LocalStack, free_port, revoke_plan_keys
from tests.integration.jobs_support import compact_closed_hours

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def running(
    data_dir: Path, *, crash: bool = False, checkpoint_s: float = 3600
) -> Iterator[tuple[LocalStack, httpx.Client, Drainer]]:
    """A stack on ``data_dir`` with its HTTP API; stopped cleanly, or like a killed process."""
    stack = LocalStack(env_overrides=QUIET_ENV, data_dir=data_dir, checkpoint_s=checkpoint_s).start()
    try:
        invoker = stack.invoker()
        api = LocalApi(stack, invoker)
        try:
            with httpx.Client(base_url=api.start(), timeout=30) as client:
                yield stack, client, Drainer(stack, invoker)
        finally:
            api.stop()
    finally:
        stack.stop(checkpoint=not crash)


def post(client: httpx.Client, key: str, op_id: str) -> httpx.Response:
    return client.post(
        "/events",
        json={"op_id": op_id, "endpoint": "tool:query_db", "success": True, "duration_ms": 3},
        headers={"x-api-key": key},
    )


def lake_rows() -> list[tuple[Any, ...]]:
    engine = EmbeddedEngine.from_settings(load_settings())
    return sorted(engine.run("SELECT reporter_id, op_id, ingested_at FROM ops").rows)


def ops_partitions(stack: LocalStack) -> dict[tuple[str, ...], str]:
    partitions = stack.client("glue").get_partitions(
        DatabaseName=stack.environment["OPSLAKE_GLUE_DATABASE"], TableName="ops"
    )["Partitions"]
    return {tuple(p["Values"]): p["StorageDescriptor"]["Location"] for p in partitions}


def compact(stack: LocalStack) -> None:
    assert compact_closed_hours(stack).compacted


def ops_files(stack: LocalStack) -> set[tuple[str, str]]:
    """(reporter_id, op_id) of every row in the writer's files under ops/."""
    s3 = stack.client("s3")
    found = set()
    for item in s3.list_objects_v2(Bucket=stack.bucket, Prefix="ops/").get("Contents", []):
        body = s3.get_object(Bucket=stack.bucket, Key=item["Key"])["Body"].read()
        table = pq.read_table(io.BytesIO(body), columns=["reporter_id", "op_id"])
        found |= set(
            zip(table.column("reporter_id").to_pylist(), table.column("op_id").to_pylist(), strict=True)
        )
    return found


def queued(stack: LocalStack) -> list[dict[str, Any]]:
    sqs = stack.client("sqs")
    url = stack.environment["OPSLAKE_OPS_QUEUE_URL"]
    messages = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"], VisibilityTimeout=0
    ).get("Messages", [])
    return messages


def test_a_restart_keeps_the_lake_the_queue_and_the_keys(tmp_path: Path) -> None:
    with running(tmp_path) as (stack, client, drainer):
        assert stack.restored is not None and stack.restored.saved_at is None  # nothing saved yet
        default_key = stack.api_key.value if stack.api_key else ""
        runtime_b = stack.create_api_key("runtime-b")
        revoked = stack.create_api_key("runtime-c")
        assert revoke_plan_keys(stack.client("apigateway"), stack.usage_plan(), "runtime-c")
        for op_id in ("written-1", "written-2"):  # two batches: two files in this hour
            assert post(client, runtime_b.value, op_id).status_code == 202
            assert drainer.drain().written == 1
        compact(stack)  # the hour's Glue location moves to its compacted files
        assert post(client, runtime_b.value, "queued-1").status_code == 202  # not drained: in the queue
        rows_before = lake_rows()
        (pending,) = queued(stack)
        partitions_before = ops_partitions(stack)
        assert all("ops-compacted/" in location for location in partitions_before.values())

    assert (tmp_path / MANIFEST).is_file()
    assert oct((tmp_path / MANIFEST).stat().st_mode & 0o777) == "0o600"  # it holds key values

    with running(tmp_path) as (stack, client, drainer):
        assert stack.restored is not None and stack.restored.messages == 1
        assert stack.api_key is not None and stack.api_key.value == default_key  # the printed key still works
        assert post(client, runtime_b.value, "after-restart").status_code == 202
        assert post(client, default_key, "default-key").status_code == 202
        assert post(client, revoked.value, "revoked").status_code == 403  # a revocation is kept too
        assert lake_rows() == rows_before  # the lake as it was, before anything new is drained
        assert ops_partitions(stack) == partitions_before
        (again, *_) = queued(stack)
        assert again["Body"] == pending["Body"]
        assert (
            again["Attributes"]["SentTimestamp"] == pending["Attributes"]["SentTimestamp"]
        )  # ingested_at kept
        assert drainer.drain().written == 3
        # The hour was compacted before the restart, so these files wait under ops/ for the next
        # compaction (as late files do in AWS); read them where the writer put them.
        assert ops_files(stack) >= {
            ("runtime-b", "queued-1"),
            ("runtime-b", "after-restart"),
            (stack.key_name, "default-key"),
        }


def test_a_data_dir_with_the_old_failures_table_starts_and_failures_is_a_view(tmp_path: Path) -> None:
    """issue 13: ``failures`` is no longer a table but a view: a data dir checkpointed before that
    holds partitions of the old table. They are skipped (counted), the stack starts, and the view
    is there from the start, before any analyzer run."""
    database = next(
        str(d["Name"]) for d in LocalStack(env_overrides=QUIET_ENV).template.glue_databases().values()
    )
    (tmp_path / "blobs").mkdir()
    old_partition = {
        "database": database,
        "table": "failures",
        "values": ["2026-11-20", "10"],
        "storage": {"Location": "s3://x/derived/failures/dt=2026-11-20/hour=10/"},
        "parameters": {},
    }
    manifest = {
        "version": 1,
        "saved_at": "2026-11-20T10:00:00+00:00",
        "objects": [],
        "keys": [],
        "queues": {},
        "partitions": [old_partition],
    }
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    with running(tmp_path) as (stack, client, drainer):
        assert stack.restored is not None
        assert (stack.restored.partitions, stack.restored.partitions_skipped) == (0, 1)
        table = stack.client("glue").get_table(DatabaseName=database, Name="failures")["Table"]
        assert table["TableType"] == "VIRTUAL_VIEW"
        key = stack.api_key.value if stack.api_key else ""
        failed = {
            "op_id": "failed-1",
            "endpoint": "tool:query_db",
            "success": False,
            "duration_ms": 3,
            "error": "boom 12",
        }
        assert client.post("/events", json=failed, headers={"x-api-key": key}).status_code == 202
        assert drainer.drain().written == 1
        engine = EmbeddedEngine.from_settings(load_settings())
        assert engine.run("SELECT op_id FROM failures").rows == [("failed-1",)]


def test_a_crash_keeps_the_last_checkpoint_and_a_torn_one_changes_nothing(tmp_path: Path) -> None:
    with running(tmp_path, crash=True) as (stack, client, drainer):
        key = stack.create_api_key("runtime-d")
        assert post(client, key.value, "checkpointed").status_code == 202
        assert drainer.drain().written == 1
        saved = stack.checkpoint()
        assert saved is not None and saved.keys == 2 and saved.messages == 0
        assert post(client, key.value, "after-checkpoint").status_code == 202  # lost by the crash
    # A checkpoint torn by the crash: a half-written manifest and a blob no manifest names.
    (tmp_path / f".{MANIFEST}.123.tmp").write_text('{"version": 1, "objects": [')
    stray = tmp_path / "blobs" / "ff" / ("f" * 64)
    stray.parent.mkdir(exist_ok=True)
    stray.write_bytes(b"half")

    with running(tmp_path) as (stack, client, _):
        assert [r[1] for r in lake_rows()] == ["checkpointed"]
        assert stack.restored is not None and stack.restored.messages == 0
        assert post(client, key.value, "still-authenticates").status_code == 202
        assert not stray.exists()


def saved_key_names(data_dir: Path) -> set[str]:
    manifest = data_dir / MANIFEST
    return {k["name"] for k in json.loads(manifest.read_text())["keys"]} if manifest.is_file() else set()


def wait_until(condition: Callable[[], bool]) -> None:
    for _ in range(200):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("the checkpoint never came")


def test_a_key_revoked_from_another_process_stays_revoked_after_a_crash(tmp_path: Path) -> None:
    with running(tmp_path, crash=True, checkpoint_s=0.1) as (stack, client, _):
        key = stack.create_api_key("runtime-e")
        wait_until(lambda: "runtime-e" in saved_key_names(tmp_path))  # a new key alone triggers one
        # `opslake keys revoke` talks to moto directly, not through this stack's functions:
        assert revoke_plan_keys(stack.client("apigateway"), stack.usage_plan(), "runtime-e")
        wait_until(lambda: "runtime-e" not in saved_key_names(tmp_path))
    with running(tmp_path) as (_, client, _):
        assert post(client, key.value, "revoked").status_code == 403


def test_two_stacks_never_share_a_data_directory(tmp_path: Path) -> None:
    with running(tmp_path), pytest.raises(PersistenceError, match="in use by another local stack"):
        LocalStack(env_overrides=QUIET_ENV, data_dir=tmp_path).start()


class Up:
    """``opslake local up`` in a child process, read line by line until it is up."""

    def __init__(self, tmp_path: Path, *extra: str) -> None:
        self.state = tmp_path / "local.json"
        argv = [
            "--state",
            str(self.state),
            "local",
            "up",
            "--port",
            str(free_port()),
            "--poll",
            "0.2",
            *extra,
        ]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "opslake_local.cli", *argv],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **QUIET_ENV},
        )
        self.lines: list[str] = []
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if line.startswith("Ctrl-C to stop."):
                break
        self.output = "".join(self.lines)
        assert "Ctrl-C to stop." in self.output, self.output

    def field(self, name: str) -> str:
        match = re.search(rf"^  {name}\s+(\S+)", self.output, re.MULTILINE)
        assert match, self.output
        return match.group(1)

    def wait_for(self, text: str) -> bool:
        """Read the output until a line contains ``text`` (False: the process ended first)."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if text in line:
                return True
        return False

    def stop(self) -> str:
        self.process.send_signal(signal.SIGINT)
        rest, _ = self.process.communicate(timeout=60)
        assert self.process.returncode == 0, rest
        return rest


def test_opslake_local_up_keeps_its_data_across_a_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    first = Up(tmp_path, "--data-dir", str(data))
    try:
        assert f"data         {data}   (new: kept across restarts" in first.output
        key = first.field("API key")
        with httpx.Client(base_url=first.field("API"), timeout=30) as client:
            assert post(client, key, "before-restart").status_code == 202
        assert first.wait_for("writer: 1 messages, 1 done")
    finally:
        first.stop()

    second = Up(tmp_path, "--data-dir", str(data))
    try:
        restored = r"data .*\(restored \d+ objects, \d+ partitions, 0 queued messages and 1 keys saved"
        assert re.search(restored, second.output), second.output
        assert second.field("API key") == key  # the key printed last time still works
        assert main(["--state", str(second.state), "query", "SELECT op_id FROM ops", "--format", "csv"]) == 0
        assert capsys.readouterr().out.split() == ["op_id", "before-restart"]
    finally:
        second.stop()


def test_opslake_local_up_ephemeral_says_loudly_that_it_keeps_nothing(tmp_path: Path) -> None:
    up = Up(tmp_path, "--ephemeral")
    try:
        # once, at start (issue 12: it was printed twice); the banner's data line says it too
        assert up.output.count("WARNING: --ephemeral") == 1
        assert up.output.index("WARNING: --ephemeral") < up.output.index("opslake local stack is up")
        assert "in memory only (--ephemeral)" in up.output
        assert "\nCtrl-C to stop." in up.output
        assert json.loads(up.state.read_text())["data_dir"] is None
    finally:
        up.stop()
