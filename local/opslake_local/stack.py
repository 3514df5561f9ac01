"""The Docker-free local stack: a moto server provisioned from template.yaml.

``LocalStack`` starts moto's threaded server on 127.0.0.1, points this process's boto3 at it
(``AWS_ENDPOINT_URL``), and creates what the template declares: buckets (encryption, public
access block, versioning, policy), queues with their redrive policies, the Glue database and
tables, the Athena workgroup and named queries, and an API key bound to the stack's usage plan.
Handlers then run in this process with the same environment variables the template gives them in
Lambda, plus :func:`LocalStack.local_environment` (queries go to the embedded engine).

moto keeps everything in memory. With a ``data_dir`` (``opslake local up`` passes
``.opslake/data/``) the lake, the queues and the API keys are checkpointed there every few seconds
while no function runs, and on stop, and restored at the next start (:mod:`opslake_local.persist`);
without one (tests, the demo, ``opslake invoke``'s ephemeral stack) a stop loses everything.

The API-key helpers (:func:`create_plan_key`, :func:`plan_keys`, :func:`revoke_plan_keys`) work on
any API Gateway client, moto's or AWS's: ``opslake keys`` uses them for both.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from moto.server import ThreadedMotoServer

from opslake_local.dataset import load_dataset
from opslake_local.invoke import Invoker, import_cold, reset_shared_caches
from opslake_local.persist import (
    DEFAULT_CHECKPOINT_S,
    QUIESCE_WAIT_S,
    Checkpoint,
    LocalData,
    QuiesceGate,
    Restored,
)
from opslake_local.template import Template, TemplateError, find_template

log = logging.getLogger(__name__)

LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
DEFAULT_KEY_NAME = "local-agent"
# For demos and tests: handler errors only, no EMF metric lines on stdout.
QUIET_ENV = {"POWERTOOLS_LOG_LEVEL": "ERROR", "POWERTOOLS_METRICS_DISABLED": "true"}
# Athena API Configuration keys that CloudFormation's WorkGroupConfiguration shares.
_ATHENA_CONFIG_KEYS = (
    "ResultConfiguration", "EnforceWorkGroupConfiguration", "PublishCloudWatchMetricsEnabled",
    "BytesScannedCutoffPerQuery", "RequesterPaysEnabled",
)  # fmt: skip
#: A quiet stack still checkpoints this often: keys made by ``opslake keys`` in another process
#: and objects put from outside are not invocations of this stack's functions.
CHECKPOINT_ANYWAY_S = 30.0


def free_port() -> int:
    """An unused TCP port on 127.0.0.1 (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _encryption_rules(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """CloudFormation's ServerSideEncryptionByDefault is the API's ApplyServerSideEncryptionByDefault."""
    converted = []
    for rule in rules:
        rule = dict(rule)
        if "ServerSideEncryptionByDefault" in rule:
            rule["ApplyServerSideEncryptionByDefault"] = rule.pop("ServerSideEncryptionByDefault")
        converted.append(rule)
    return converted


def _local_policy(document: dict[str, Any]) -> dict[str, Any]:
    """The bucket policy minus statements keyed on ``aws:SecureTransport``: moto enforces bucket
    policies, and the local endpoint is plain HTTP, so a TLS-only Deny would refuse everything."""
    statements = document.get("Statement") or []
    if isinstance(statements, dict):
        statements = [statements]
    kept = [s for s in statements if "aws:securetransport" not in json.dumps(s.get("Condition", {})).lower()]
    if len(kept) < len(statements):
        log.info("bucket policy: %d TLS-only statement(s) not applied locally", len(statements) - len(kept))
    return {**document, "Statement": kept}


@dataclass(frozen=True)
class ApiKey:
    """An API Gateway key in the local stack: send ``value`` as ``x-api-key``."""

    id: str
    name: str
    value: str


def create_plan_key(
    apigateway: Any, usage_plan_id: str, name: str, value: str | None = None, *, enabled: bool = True
) -> ApiKey:
    """A new API key named ``name`` (the reporter identity), bound to the usage plan."""
    value = value or secrets.token_urlsafe(30)[:40]
    key = apigateway.create_api_key(name=name, enabled=enabled, value=value)
    apigateway.create_usage_plan_key(usagePlanId=usage_plan_id, keyId=key["id"], keyType="API_KEY")
    return ApiKey(id=key["id"], name=name, value=value)


def plan_keys(apigateway: Any, usage_plan_id: str) -> list[dict[str, Any]]:
    """The keys bound to the usage plan: id, name, enabled, created (values are never listed)."""
    bound = []
    for page in apigateway.get_paginator("get_usage_plan_keys").paginate(usagePlanId=usage_plan_id):
        bound.extend(page.get("items", []))
    keys = []
    for item in bound:
        try:
            key = apigateway.get_api_key(apiKey=item["id"], includeValue=False)
        except apigateway.exceptions.NotFoundException:  # deleted, but still bound (moto keeps it)
            continue
        keys.append(
            {
                "id": key["id"],
                "name": key.get("name", item.get("name", "")),
                "enabled": bool(key.get("enabled")),
                "created": key.get("createdDate"),
            }
        )
    return sorted(keys, key=lambda k: (k["name"], k["id"]))


def revoke_plan_keys(apigateway: Any, usage_plan_id: str, name: str) -> list[str]:
    """Delete every key of the usage plan named ``name``; returns their ids (empty: none had it)."""
    revoked = []
    for key in plan_keys(apigateway, usage_plan_id):
        if key["name"] == name:
            apigateway.delete_usage_plan_key(usagePlanId=usage_plan_id, keyId=key["id"])
            apigateway.delete_api_key(apiKey=key["id"])
            revoked.append(key["id"])
    return revoked


class _GatedInvoker(Invoker):
    """An invoker whose invocations share the stack's :class:`QuiesceGate`, so that a checkpoint
    sees no function half-way (a writer batch, a compaction step, an ingest's queue send)."""

    def __init__(self, template: Template, *, env_overrides: Mapping[str, str], gate: QuiesceGate) -> None:
        super().__init__(template, env_overrides=env_overrides)
        self._gate = gate

    def invoke(self, logical_id: str, event: Mapping[str, Any]) -> Any:
        with self._gate.shared():
            return super().invoke(logical_id, event)


class LocalStack:
    """moto server + resources from template.yaml; a context manager.

    ``environment`` is what this process's environment holds while the stack runs (AWS
    endpoint and credentials plus every function's template variables); ``stop()`` restores
    the environment it found.
    """

    def __init__(
        self,
        template_path: Path | None = None,
        *,
        port: int | None = None,
        parameters: Mapping[str, str] | None = None,
        env_overrides: Mapping[str, str] | None = None,
        key_name: str = DEFAULT_KEY_NAME,
        data_dir: Path | None = None,
        checkpoint_s: float = DEFAULT_CHECKPOINT_S,
    ) -> None:
        self.template = Template(template_path or find_template(), parameters=parameters)
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.region = self.template.region
        self.env_overrides = dict(env_overrides or {})
        self.key_name = key_name
        self.api_key: ApiKey | None = None
        self.usage_plan_id: str | None = None
        self.environment: dict[str, str] = {}
        self._server: ThreadedMotoServer | None = None
        self._saved_env: dict[str, str | None] = {}
        self.data_dir = data_dir
        self.checkpoint_s = checkpoint_s
        self.gate = QuiesceGate()
        self.restored: Restored | None = None  # what the last start restored from data_dir
        self.last_checkpoint: Checkpoint | None = None
        self._data: LocalData | None = None
        self._started = False  # only a stack that started whole may overwrite its checkpoint
        self._checkpointer: threading.Thread | None = None
        self._stop_checkpoints = threading.Event()
        self._saved_key_ids: set[str] = set()  # the usage plan's keys at the last checkpoint

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> LocalStack:
        """Start moto, point boto3 at it, provision every resource the template declares, and put
        back what ``data_dir`` holds (then checkpoint there every ``checkpoint_s`` seconds)."""
        if self.data_dir is not None:
            self._data = LocalData(self.data_dir).open()  # first: a second stack fails before moto starts
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        try:
            # moto's backends are per process, not per server: forget an earlier stack's resources.
            urllib.request.urlopen(
                urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST"), timeout=10
            ).close()
            self._apply_env(self._aws_env())
            manifest = self._data.manifest() if self._data else None
            self.provision(saved_keys=manifest["keys"] if manifest else None)
            self._apply_env({**self.function_environment(), **self.local_environment(), **self.env_overrides})
            load_dataset(self.client("s3"), self.bucket)  # the sample tables the gateway tools read
            if self._data is not None:
                self.restored = self._data.restore(self.client, queues=self._queue_urls(), region=self.region)
            self._provision_views()
        except BaseException:
            self.stop(checkpoint=False)
            raise
        self._started = True
        if self._data is not None:
            self._saved_key_ids = self._plan_key_ids()
            self._stop_checkpoints.clear()
            self._checkpointer = threading.Thread(
                target=self._checkpoint_loop, name="opslake-checkpoints", daemon=True
            )
            self._checkpointer.start()
        return self

    def stop(self, *, checkpoint: bool = True) -> None:
        """Checkpoint (with a ``data_dir``; ``checkpoint=False`` is a crash, for tests), stop moto
        and restore the process environment as it was before ``start``."""
        if self._checkpointer is not None:
            self._stop_checkpoints.set()
            self._checkpointer.join(timeout=60)
            self._checkpointer = None
        if self._data is not None:
            try:
                if checkpoint and self._started and self._server is not None:
                    self.checkpoint(wait_s=None)
            finally:
                self._data.close()
                self._data = None
        self._started = False
        if self._server is not None:
            self._server.stop()
            self._server = None
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env.clear()
        reset_shared_caches()  # settings cached from this stack's environment must not outlive it

    # -- persistence --------------------------------------------------------------------------
    def checkpoint(self, *, wait_s: float | None = QUIESCE_WAIT_S) -> Checkpoint | None:
        """Save the lake, queues and keys to ``data_dir`` once no function runs (waiting up to
        ``wait_s``; None: as long as it takes). None when there is no ``data_dir`` or the stack
        stayed busy (the next checkpoint tries again)."""
        if self._data is None or not self._started:
            return None
        with self.gate.exclusive(wait_s) as quiet:
            if not quiet:
                return None
            self.gate.changes = 0
            self._saved_key_ids = self._plan_key_ids()
            self.last_checkpoint = self._data.checkpoint(
                self.client,
                buckets=[str(self.template.ref(b)) for b in self.template.buckets()],
                databases=[str(d["Name"]) for d in self.template.glue_databases().values()],
                queues=self._queue_urls(),
                region=self.region,
                usage_plan_id=self.usage_plan_id,
            )
        return self.last_checkpoint

    def _checkpoint_loop(self) -> None:
        """Checkpoint after invocations or a change of the keys (``opslake keys`` runs in another
        process: a revoked key must not come back after a crash), at most every ``checkpoint_s``;
        when quiet, now and then."""
        last = time.monotonic()
        while not self._stop_checkpoints.wait(self.checkpoint_s):
            quiet = not self.gate.changes and time.monotonic() - last < CHECKPOINT_ANYWAY_S
            try:
                if quiet and self._plan_key_ids() == self._saved_key_ids:
                    continue
            except Exception:
                log.exception("cannot list the local stack's keys")
            try:
                if self.checkpoint() is not None:
                    last = time.monotonic()
            except Exception:  # a failed checkpoint keeps the previous one; say so and go on
                log.exception("checkpoint of the local stack to %s failed", self.data_dir)

    def _plan_key_ids(self) -> set[str]:
        """The ids of the keys bound to the usage plan (a revoked key is unbound)."""
        if self.usage_plan_id is None:
            return set()
        pages = (
            self.client("apigateway")
            .get_paginator("get_usage_plan_keys")
            .paginate(usagePlanId=self.usage_plan_id)
        )
        return {str(item["id"]) for page in pages for item in page.get("items", [])}

    def _queue_urls(self) -> dict[str, str]:
        return {q.logical_id: self.queue_url(q.logical_id) for q in self.template.queues()}

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- environment --------------------------------------------------------------------------
    def _aws_env(self) -> dict[str, str]:
        """What makes every boto3 client in this process talk to the moto server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_EC2_METADATA_DISABLED": "true",
            "POWERTOOLS_TRACE_DISABLED": "true",
            **LOCAL_CREDENTIALS,
        }

    def _apply_env(self, values: Mapping[str, str]) -> None:
        """Set variables in os.environ, remembering the previous values for ``stop``."""
        for name, value in values.items():
            self._saved_env.setdefault(name, os.environ.get(name))
            os.environ[name] = value
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            if name in os.environ:
                self._saved_env.setdefault(name, os.environ.pop(name))
        self.environment.update(values)

    def function_environment(self) -> dict[str, str]:
        """Variables every function agrees on (Globals and identical values); per-function
        differences such as POWERTOOLS_SERVICE_NAME are applied when each handler is loaded."""
        envs = [spec.environment for spec in self.template.functions().values()]
        if not envs:
            return {}
        shared = dict(envs[0])
        for env in envs[1:]:
            shared = {k: v for k, v in shared.items() if env.get(k) == v}
        return shared

    def local_environment(self) -> dict[str, str]:
        """What only the local stack adds to every function: Athena SQL runs on the embedded
        engine (DuckDB over the moto lake), in the template's workgroup."""
        env = {"OPSLAKE_QUERY_ENGINE": "embedded"}
        workgroups = [str(props["Name"]) for props in self.template.athena_workgroups().values()]
        if workgroups:
            env["OPSLAKE_ATHENA_WORKGROUP"] = workgroups[0]
        return env

    # -- provisioning -------------------------------------------------------------------------
    def client(self, service: str) -> Any:
        """A boto3 client for the moto server (explicit endpoint: works before env is set), with
        the retry configuration of every opslake client."""
        # Importing opslake.runtime creates the service's Powertools logger (through opslake.http),
        # maybe before start() applies the overrides: it does so under them, so that e.g.
        # QUIET_ENV's log level holds for the handlers this process runs.
        runtime = import_cold("opslake.runtime", self.env_overrides)
        return runtime.new_client(
            service,
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def provision(self, *, saved_keys: list[dict[str, Any]] | None = None) -> None:
        """Create every supported resource from the template, in dependency order, and the API
        keys: ``saved_keys`` (name, value, enabled) as they were, else a new ``key_name`` key."""
        self._provision_buckets()
        self._provision_queues()
        self._provision_glue()
        self._provision_athena()
        self._provision_named_queries()
        self._provision_keys(saved_keys or [])

    def _provision_keys(self, saved: list[dict[str, Any]]) -> None:
        """Re-create saved keys with their values (ids change; a key's name, the reporter_id, and
        its value do not); the stack's own key is the saved one of that name, or a new one."""
        apigateway = self.client("apigateway")
        for item in saved:
            key = create_plan_key(
                apigateway, self.usage_plan(), item["name"], item["value"], enabled=bool(item["enabled"])
            )
            if key.name == self.key_name and item["enabled"] and self.api_key is None:
                self.api_key = key
        if self.api_key is None:
            self.api_key = self.create_api_key(self.key_name)

    def _provision_buckets(self) -> None:
        """Buckets with the encryption, public access block, versioning and policy declared."""
        s3 = self.client("s3")
        for logical_id, props in self.template.buckets().items():
            name = self.template.ref(logical_id)
            s3.create_bucket(Bucket=name)
            encryption = props.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration")
            if encryption:
                s3.put_bucket_encryption(
                    Bucket=name, ServerSideEncryptionConfiguration={"Rules": _encryption_rules(encryption)}
                )
            if "PublicAccessBlockConfiguration" in props:
                s3.put_public_access_block(
                    Bucket=name, PublicAccessBlockConfiguration=props["PublicAccessBlockConfiguration"]
                )
            if "VersioningConfiguration" in props:
                s3.put_bucket_versioning(
                    Bucket=name, VersioningConfiguration=props["VersioningConfiguration"]
                )
        for logical_id in self.template.of_type("AWS::S3::BucketPolicy"):
            try:
                props = self.template.properties(logical_id)
            except TemplateError as exc:  # e.g. a principal that only exists once deployed
                log.warning("skipping %s locally: %s", logical_id, exc)
                continue
            policy = _local_policy(props["PolicyDocument"])
            if policy["Statement"]:
                s3.put_bucket_policy(Bucket=props["Bucket"], Policy=json.dumps(policy))

    def _provision_queues(self) -> None:
        """Queues with their attributes; a redrive policy points at the real DLQ ARN."""
        sqs = self.client("sqs")
        arns: dict[str, str] = {}
        for queue in self.template.queues():
            attributes = dict(queue.attributes)
            if queue.dead_letter_queue:
                attributes["RedrivePolicy"] = json.dumps(
                    {
                        "deadLetterTargetArn": arns[queue.dead_letter_queue],
                        "maxReceiveCount": queue.max_receive_count,
                    }
                )
            url = sqs.create_queue(QueueName=queue.name, Attributes=attributes)["QueueUrl"]
            arns[queue.logical_id] = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
                "Attributes"
            ]["QueueArn"]
            self.template.set_queue_url(queue.logical_id, url)

    def _provision_glue(self) -> None:
        """The Glue databases and every AWS::Glue::Table with its full TableInput."""
        glue = self.client("glue")
        for database_input in self.template.glue_databases().values():
            glue.create_database(DatabaseInput=database_input)
        for database, table_input in self.template.glue_tables().values():
            glue.create_table(DatabaseName=database, TableInput=table_input)

    def _provision_views(self) -> None:
        """The ``failures`` view over ``ops``, with the analyzer's own function (one definition):
        queryable from the start, not only after the first analyzer run (the analyzer updates it
        when the masking rules change). Skipped when the template has no Glue database for it."""
        settings = import_cold("opslake.config", self.env_overrides).load_settings()
        databases = {str(d["Name"]) for d in self.template.glue_databases().values()}
        if settings.glue_database not in databases or not settings.ops_table:
            return
        analyzer = import_cold("opslake.jobs.analyzer", self.env_overrides)
        analyzer.ensure_failures_view(self.client("glue"), settings.glue_database, settings.ops_table)

    def _provision_athena(self) -> None:
        """Athena workgroups (moto keeps the configuration; the local engine does the querying)."""
        athena = self.client("athena")
        for props in self.template.athena_workgroups().values():
            config = props.get("WorkGroupConfiguration") or {}
            athena.create_work_group(
                Name=props["Name"],
                Configuration={k: config[k] for k in _ATHENA_CONFIG_KEYS if k in config},
                Description=props.get("Description", ""),
            )

    def _provision_named_queries(self) -> None:
        """The analyst queries (AWS::Athena::NamedQuery), so ``list-named-queries`` works locally."""
        athena = self.client("athena")
        for logical_id in self.template.of_type("AWS::Athena::NamedQuery"):
            props = self.template.properties(logical_id)
            athena.create_named_query(
                Name=props["Name"],
                Description=props.get("Description", ""),
                Database=props["Database"],
                QueryString=props["QueryString"],
                WorkGroup=props.get("WorkGroup", "primary"),
            )

    def usage_plan(self) -> str:
        """The stack's usage plan (one per stack, as SAM's PER_API plan), created on first use."""
        if self.usage_plan_id is None:
            plan = self.client("apigateway").create_usage_plan(
                name=f"{self.template.stack_name}-usage-plan", **self._usage_plan_limits()
            )
            self.usage_plan_id = str(plan["id"])
        return self.usage_plan_id

    def create_api_key(self, name: str) -> ApiKey:
        """A new enabled API key bound to the stack's usage plan (like an agent's)."""
        key = create_plan_key(self.client("apigateway"), self.usage_plan(), name)
        self.gate.changes += 1  # kept at the next checkpoint
        return key

    def _usage_plan_limits(self) -> dict[str, Any]:
        """Throttle/quota from the first template API that declares a usage plan (not enforced)."""
        for api_id in self.template.of_type("AWS::Serverless::Api"):
            plan = self.template.api_usage_plan(api_id)
            limits: dict[str, Any] = {}
            if "Throttle" in plan:
                throttle = plan["Throttle"]
                limits["throttle"] = {
                    "burstLimit": int(throttle.get("BurstLimit", 0)),
                    "rateLimit": float(throttle.get("RateLimit", 0)),
                }
            if "Quota" in plan:
                quota = plan["Quota"]
                limits["quota"] = {
                    "limit": int(quota.get("Limit", 0)),
                    "period": str(quota.get("Period", "DAY")),
                }
            if limits:
                return limits
        return {}

    # -- convenience --------------------------------------------------------------------------
    def invoker(self) -> Invoker:
        """An invoker for this stack's functions (a fresh one is a fresh cold start)."""
        return _GatedInvoker(self.template, env_overrides=self.env_overrides, gate=self.gate)

    @property
    def bucket(self) -> str:
        """The lake bucket: the one the functions' OPSLAKE_LAKE_BUCKET names."""
        name = self.environment.get("OPSLAKE_LAKE_BUCKET")
        if name:
            return name
        buckets = list(self.template.buckets())
        if not buckets:
            raise TemplateError("the template declares no bucket")
        return str(self.template.ref(buckets[0]))

    def queue_url(self, logical_id: str) -> str:
        """The local URL of a template queue."""
        return str(self.template.ref(logical_id))

    def describe(self) -> dict[str, Any]:
        """What later commands and humans need to find this stack."""
        return {
            "moto_endpoint": self.endpoint,
            "region": self.region,
            "template": str(self.template.path),
            "bucket": self.bucket,
            "queues": {q.logical_id: self.queue_url(q.logical_id) for q in self.template.queues()},
            "api_key": self.api_key.value if self.api_key else None,
            "api_key_name": self.api_key.name if self.api_key else None,
            "usage_plan_id": self.usage_plan_id,
            "data_dir": str(self.data_dir) if self.data_dir is not None else None,
            "environment": {k: v for k, v in self.environment.items() if not k.startswith("AWS_SECRET")},
        }
