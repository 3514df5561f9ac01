"""The local stack's data on disk: the lake, the queues and the API keys survive a restart.

moto keeps everything in memory, so ``opslake local up`` checkpoints what a restart must not lose
into a directory (``.opslake/data/`` by default) and restores it into the fresh moto server at the
next start:

* **S3**: every object of the template's buckets (current versions, with their content type and
  user metadata), stored once per content under ``blobs/`` (content-addressed, so an unchanged
  lake costs one listing per checkpoint, and an object is never rewritten);
* **Glue**: every partition of the template's databases, with its location (compaction moves a
  partition's location to its compacted files);
* **SQS**: every message of the template's queues, with its body, attributes, send time (the
  writer's ``ingested_at``) and receive count (so a poison message still reaches the DLQ);
* **API Gateway**: the usage plan's keys, by name, value and enabled flag; they are re-created
  with the same values (a key's id changes; its name, the ``reporter_id``, does not).

Crash consistency: a checkpoint writes its blobs first, then ``manifest.json`` through a temporary
file, ``fsync`` and ``os.replace``; the manifest is the commit point, so a crash at any moment
leaves the previous checkpoint or the new one, never a mix. A checkpoint is taken while no
function runs (:class:`QuiesceGate`): the writer's S3 puts and Glue partitions, compaction's
journal, outputs and swap, and the ingest's queue sends are each seen whole. What happened after
the last checkpoint is lost by a crash (``kill -9``); a clean stop checkpoints last. A message the
writer had received but not yet deleted may be restored and written once more: the lake dedupes
it as it does an SQS redelivery (same key, same ``op_id``, same ``ingested_at`` hour).

Reading a queue without receiving from it (receiving would count toward ``maxReceiveCount``) and
restoring a message's send time use moto's in-process SQS backend: :func:`_moto_queue` is the one
place that touches moto's internals, and it fails loudly if they change.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

MANIFEST = "manifest.json"
LOCK_FILE = "lock"
BLOBS = "blobs"
FORMAT_VERSION = 1
DEFAULT_CHECKPOINT_S = 5.0
#: How long a periodic checkpoint waits for running invocations to finish before it tries again
#: later (an analyzer run can take minutes). New requests never wait for it: see :class:`QuiesceGate`.
QUIESCE_WAIT_S = 2.0

log = logging.getLogger(__name__)


class PersistenceError(RuntimeError):
    """The data directory cannot be used (held by another stack, unreadable, or moto changed)."""


# ---- quiescence -----------------------------------------------------------------------------------
class QuiesceGate:
    """Invocations share the gate; a checkpoint holds it alone.

    A periodic checkpoint (with a timeout) waits for quiet *without* holding new invocations back:
    they only wait while a checkpoint actually runs (milliseconds to a few seconds). Holding them
    while it waited would stall every request for the whole timeout, every few seconds, for as
    long as a long invocation (a multi-minute analyzer run) keeps the stack from being quiet. It
    takes the gate at the first quiet moment, or gives up and tries again later; a stack never
    quiet for a whole timeout is not checkpointed meanwhile. The checkpoint without a timeout (at
    stop, which must happen) is writer-preferring: once it waits, new invocations wait for it, so
    a busy stack cannot starve it. Not reentrant: no function invokes another through the gate.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = 0
        self._exclusive = False
        self._waiting = 0  # checkpoints waiting for quiet
        self._preferred = 0  # of which without a timeout: new invocations wait for these
        self.changes = 0  # invocations since the last checkpoint (a quiet stack skips checkpoints)

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive or self._preferred:
                self._cond.wait()
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self.changes += 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self, timeout_s: float | None = None) -> Iterator[bool]:
        """Yields True once no invocation runs, or False after ``timeout_s`` (then nothing is held).
        Only without a timeout does the wait hold new invocations back (see the class doc)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        prefer = timeout_s is None
        with self._cond:
            self._waiting += 1
            self._preferred += prefer
            try:
                while self._running or self._exclusive:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        break
                    self._cond.wait(remaining)
                got = not self._running and not self._exclusive
                if got:
                    self._exclusive = True
            finally:
                self._waiting -= 1
                self._preferred -= prefer
                self._cond.notify_all()
        try:
            yield got
        finally:
            if got:
                with self._cond:
                    self._exclusive = False
                    self._cond.notify_all()


# ---- moto's in-process SQS ------------------------------------------------------------------------
def _moto_queue(queue_url: str, region: str) -> Any:
    """moto's in-process queue behind ``queue_url`` (``http://host/<account>/<name>``)."""
    try:
        from moto.sqs.models import sqs_backends

        account, name = queue_url.rstrip("/").split("/")[-2:]
        queue = sqs_backends[account][region].queues[name]
        queue._messages_lock, queue._messages  # noqa: B018  (fail here if moto's layout changed)
        return queue
    except (ImportError, KeyError, AttributeError, ValueError) as exc:
        raise PersistenceError(
            f"cannot read the local queue {queue_url} from moto's in-process backend ({exc!r}); "
            "this moto version keeps its queues differently: start the stack with --ephemeral"
        ) from exc


def _queue_messages(queue_url: str, region: str) -> list[dict[str, Any]]:
    """Every message of a queue, visible or in flight, without receiving it."""
    queue = _moto_queue(queue_url, region)
    with queue._messages_lock:
        messages = list(queue._messages)
    return [
        {
            "body": m.body,
            "attributes": {
                name: _encode_attribute(value) for name, value in (m.message_attributes or {}).items()
            },
            "sent_ms": int(m.sent_timestamp or 0),
            "receive_count": int(m.approximate_receive_count or 0),
        }
        for m in messages
    ]


def _encode_attribute(value: dict[str, Any]) -> dict[str, Any]:
    """A message attribute as JSON (a binary value as base64)."""
    encoded = {k: v for k, v in value.items() if k in ("DataType", "StringValue")}
    if value.get("BinaryValue") is not None:
        binary = value["BinaryValue"]
        encoded["BinaryValue"] = base64.b64encode(
            binary if isinstance(binary, bytes) else str(binary).encode()
        ).decode()
    return encoded


def _decode_attribute(value: dict[str, Any]) -> dict[str, Any]:
    decoded = dict(value)
    if "BinaryValue" in decoded:
        decoded["BinaryValue"] = base64.b64decode(decoded["BinaryValue"])
    return decoded


# ---- files ------------------------------------------------------------------------------------------
def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """``data`` at ``path``, whole or not at all (temporary file, fsync, rename, fsync the folder)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


@dataclass
class Checkpoint:
    """What one checkpoint saw (also what ``restore`` put back)."""

    objects: int = 0
    blobs_written: int = 0
    partitions: int = 0
    messages: int = 0
    keys: int = 0
    saved_at: str = ""


@dataclass
class Restored:
    """What :meth:`LocalData.restore` put back into a fresh moto server."""

    objects: int = 0
    partitions: int = 0
    #: saved partitions of tables the template no longer declares as tables (e.g. the old
    #: ``failures`` table, now a view): not restored
    partitions_skipped: int = 0
    messages: int = 0
    keys: list[dict[str, Any]] = field(default_factory=list)
    saved_at: str | None = None


class LocalData:
    """A data directory for one local stack at a time (an exclusive ``flock`` on ``lock``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.blobs = directory / BLOBS
        self._lock_file: IO[bytes] | None = None
        # (bucket, key) -> (ETag, blob) of the last checkpoint: unchanged objects are not re-read.
        self._known: dict[tuple[str, str], tuple[str, str]] = {}
        self._meta: dict[str, dict[str, Any]] = {}  # blob -> content type and user metadata

    # -- ownership ---------------------------------------------------------------------------------
    def open(self) -> LocalData:
        """Create the directory if needed and take its lock; PersistenceError if a stack holds it."""
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)  # it holds the API keys' values
        lock = open(self.directory / LOCK_FILE, "ab")  # noqa: SIM115  (held until close())
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            lock.close()
            raise PersistenceError(
                f"{self.directory} is in use by another local stack (its lock is held); stop that "
                "stack first, or give this one another --data-dir (or --ephemeral)"
            ) from exc
        self._lock_file = lock
        return self

    def close(self) -> None:
        if self._lock_file is not None:
            fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    def manifest(self) -> dict[str, Any] | None:
        """The last committed checkpoint, or None when there is none yet."""
        path = self.directory / MANIFEST
        if not path.is_file():
            return None
        try:
            manifest: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise PersistenceError(f"{path} is unreadable ({exc}); move it away to start empty") from exc
        if manifest.get("version") != FORMAT_VERSION:
            raise PersistenceError(
                f"{path} has format {manifest.get('version')!r}, expected {FORMAT_VERSION}"
            )
        return manifest

    # -- checkpoint --------------------------------------------------------------------------------
    def checkpoint(
        self,
        clients: Any,
        *,
        buckets: Sequence[str],
        databases: Sequence[str],
        queues: dict[str, str],
        region: str,
        usage_plan_id: str | None,
    ) -> Checkpoint:
        """Save the stack's state; ``clients(service)`` gives a boto3 client for the moto server.
        The caller makes sure no function runs meanwhile (:class:`QuiesceGate`)."""
        report = Checkpoint(saved_at=datetime.now(UTC).isoformat())
        # The queues first, the lake next, Glue last: the writer registers a partition before it
        # puts an object, so a partition of every object saved is saved too.
        saved_queues = {name: _queue_messages(url, region) for name, url in queues.items()}
        report.messages = sum(len(m) for m in saved_queues.values())
        objects = self._save_objects(clients("s3"), buckets, report)
        partitions = self._partitions(clients("glue"), databases)
        keys = self._keys(clients("apigateway"), usage_plan_id)
        report.objects, report.partitions, report.keys = len(objects), len(partitions), len(keys)
        manifest = {
            "version": FORMAT_VERSION,
            "saved_at": report.saved_at,
            "objects": objects,
            "partitions": partitions,
            "queues": saved_queues,
            "keys": keys,  # values: the directory is private (0700) and .opslake/ is git-ignored
        }
        _write_atomically(self.directory / MANIFEST, json.dumps(manifest).encode())
        self._collect_garbage({o["blob"] for o in objects})
        return report

    def _save_objects(self, s3: Any, buckets: Sequence[str], report: Checkpoint) -> list[dict[str, Any]]:
        objects = []
        known: dict[tuple[str, str], tuple[str, str]] = {}
        for bucket in buckets:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for item in page.get("Contents", []):
                    key, etag = item["Key"], item["ETag"]
                    previous = self._known.get((bucket, key))
                    if previous is not None and previous[0] == etag and self._blob(previous[1]).is_file():
                        blob, meta = previous[1], self._meta.get(previous[1], {})
                    else:
                        response = s3.get_object(Bucket=bucket, Key=key)
                        data, etag = response["Body"].read(), response["ETag"]
                        blob = hashlib.sha256(data).hexdigest()
                        if not self._blob(blob).is_file():
                            self._blob(blob).parent.mkdir(exist_ok=True)
                            _write_atomically(self._blob(blob), data, mode=0o600)
                            report.blobs_written += 1
                        meta = {
                            "content_type": response.get("ContentType") or "binary/octet-stream",
                            "metadata": response.get("Metadata") or {},
                        }
                        self._meta[blob] = meta
                    known[(bucket, key)] = (etag, blob)
                    objects.append({"bucket": bucket, "key": key, "blob": blob, **meta})
        self._known = known
        return objects

    def _blob(self, digest: str) -> Path:
        return self.blobs / digest[:2] / digest

    def _collect_garbage(self, referenced: set[str]) -> None:
        """Delete blobs no committed manifest names (after the manifest that dropped them)."""
        for path in self.blobs.glob("*/*"):
            if path.name not in referenced:
                path.unlink(missing_ok=True)

    @staticmethod
    def _partitions(glue: Any, databases: Sequence[str]) -> list[dict[str, Any]]:
        saved = []
        for database in databases:
            for page in glue.get_paginator("get_tables").paginate(DatabaseName=database):
                for table in page.get("TableList", []):
                    pages = glue.get_paginator("get_partitions").paginate(
                        DatabaseName=database, TableName=table["Name"]
                    )
                    for partitions in pages:
                        for partition in partitions.get("Partitions", []):
                            saved.append(
                                {
                                    "database": database,
                                    "table": table["Name"],
                                    "values": partition["Values"],
                                    "storage": partition.get("StorageDescriptor", {}),
                                    "parameters": partition.get("Parameters", {}),
                                }
                            )
        return saved

    @staticmethod
    def _keys(apigateway: Any, usage_plan_id: str | None) -> list[dict[str, Any]]:
        if usage_plan_id is None:
            return []
        keys = []
        for page in apigateway.get_paginator("get_usage_plan_keys").paginate(usagePlanId=usage_plan_id):
            for item in page.get("items", []):
                try:
                    key = apigateway.get_api_key(apiKey=item["id"], includeValue=True)
                except apigateway.exceptions.NotFoundException:  # revoked (moto keeps the binding)
                    continue
                keys.append({"name": key["name"], "value": key["value"], "enabled": bool(key.get("enabled"))})
        return sorted(keys, key=lambda k: (k["name"], k["value"]))

    # -- restore -----------------------------------------------------------------------------------
    def restore(self, clients: Any, *, queues: dict[str, str], region: str) -> Restored:
        """Put the last checkpoint back into a freshly provisioned moto server (keys are returned
        for the caller to re-create in its usage plan)."""
        manifest = self.manifest()
        if manifest is None:
            self._collect_garbage(set())
            return Restored()
        restored = Restored(saved_at=manifest.get("saved_at"), keys=list(manifest.get("keys", [])))
        s3 = clients("s3")
        known: dict[tuple[str, str], tuple[str, str]] = {}
        for item in manifest["objects"]:
            path = self._blob(item["blob"])
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise PersistenceError(
                    f"{path} (s3://{item['bucket']}/{item['key']}) is missing: {exc}"
                ) from exc
            put = s3.put_object(
                Bucket=item["bucket"],
                Key=item["key"],
                Body=data,
                ContentType=item["content_type"],
                Metadata=item.get("metadata") or {},
            )
            known[(item["bucket"], item["key"])] = (put["ETag"], item["blob"])
            self._meta[item["blob"]] = {
                "content_type": item["content_type"],
                "metadata": item.get("metadata") or {},
            }
        self._known = known
        self._collect_garbage({o["blob"] for o in manifest["objects"]})
        restored.objects = len(manifest["objects"])
        restored.partitions, restored.partitions_skipped = self._restore_partitions(
            clients("glue"), manifest["partitions"]
        )
        restored.messages = self._restore_messages(clients("sqs"), manifest["queues"], queues, region)
        return restored

    @staticmethod
    def _restore_partitions(glue: Any, partitions: list[dict[str, Any]]) -> tuple[int, int]:
        """Register the saved partitions again; (restored, skipped). A partition of a table the
        fresh stack does not have, or has as a view (a data dir saved by an older version, whose
        ``failures`` table is now a view), is skipped with a warning: its objects are restored."""
        by_table: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for p in partitions:
            by_table.setdefault((p["database"], p["table"]), []).append(p)
        restored = skipped = 0
        for (database, table), items in by_table.items():
            try:
                found = glue.get_table(DatabaseName=database, Name=table)["Table"]
                why = "a view, not a table," if found.get("TableType") == "VIRTUAL_VIEW" else ""
            except glue.exceptions.EntityNotFoundException:
                why = "no such table"
            if why:
                log.warning(
                    "skipping %d saved partition(s) of %s.%s: %s in the template",
                    len(items),
                    database,
                    table,
                    why,
                )
                skipped += len(items)
                continue
            restored += len(items)
            for start in range(0, len(items), 100):  # BatchCreatePartition takes up to 100
                chunk = items[start : start + 100]
                answer = glue.batch_create_partition(
                    DatabaseName=database,
                    TableName=table,
                    PartitionInputList=[
                        {
                            "Values": p["values"],
                            "StorageDescriptor": p["storage"],
                            "Parameters": p["parameters"],
                        }
                        for p in chunk
                    ],
                )
                for error in answer.get("Errors", []):
                    if error.get("ErrorDetail", {}).get("ErrorCode") != "AlreadyExistsException":
                        raise PersistenceError(f"Glue refused partition {error} of {database}.{table}")
                    values = error["PartitionValues"]
                    saved = next(p for p in chunk if p["values"] == values)
                    glue.update_partition(
                        DatabaseName=database,
                        TableName=table,
                        PartitionValueList=values,
                        PartitionInput={
                            "Values": values,
                            "StorageDescriptor": saved["storage"],
                            "Parameters": saved["parameters"],
                        },
                    )
        return restored, skipped

    @staticmethod
    def _restore_messages(
        sqs: Any, saved: dict[str, list[dict[str, Any]]], queues: dict[str, str], region: str
    ) -> int:
        count = 0
        for name, messages in saved.items():
            url = queues.get(name)
            if url is None:
                raise PersistenceError(f"the saved queue {name} is no longer in the template")
            backend = _moto_queue(url, region)
            for message in messages:
                sent = sqs.send_message(
                    QueueUrl=url,
                    MessageBody=message["body"],
                    MessageAttributes={k: _decode_attribute(v) for k, v in message["attributes"].items()},
                )
                # As SQS would have it after a restart: the original send time (the writer's
                # ingested_at, hence the op's partition) and receive count (the DLQ's counter).
                with backend._messages_lock:
                    restored = next(m for m in backend._messages if m.id == sent["MessageId"])
                    restored.sent_timestamp = message["sent_ms"] or restored.sent_timestamp
                    restored.approximate_receive_count = message["receive_count"]
                count += 1
        return count
