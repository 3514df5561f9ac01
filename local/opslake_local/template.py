"""Read template.yaml: the single source of truth for the local stack.

Loads the SAM/CloudFormation template with its short tags (``!Ref``, ``!Sub``, ...), resolves
intrinsic functions against local physical values, and answers the questions the local stack
asks: which functions exist and with what environment, which API routes, SQS event sources,
queues, buckets, Glue tables and Athena workgroups to provision. Nothing here talks to AWS.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

TEMPLATE_NAME = "template.yaml"
LOCAL_ACCOUNT_ID = "123456789012"  # moto's default account: ARNs and queue URLs must agree with it
LOCAL_REGION = "us-east-1"
LOCAL_STACK_NAME = "opslake-local"

# CloudFormation short tags whose long form is "Fn::<Name>".
_FN_TAGS = (
    "And", "Base64", "Cidr", "Equals", "FindInMap", "GetAZs", "If", "ImportValue", "Join", "Length",
    "Not", "Or", "Select", "Split", "Sub", "ToJsonString", "Transform",
)  # fmt: skip


class TemplateError(Exception):
    """The template cannot be read or resolved locally (says which resource and why)."""


class _NoValue:
    """Sentinel for ``AWS::NoValue``: the property it stands in for is removed."""


NO_VALUE = _NoValue()


# ---- loading ------------------------------------------------------------------------------------
class CfnLoader(yaml.SafeLoader):
    """A SafeLoader that turns CloudFormation short tags into their long JSON form."""


def _construct(tag_name: str) -> Callable[[yaml.SafeLoader, yaml.Node], dict[str, Any]]:
    """A constructor mapping ``!Tag value`` to ``{"Fn::Tag": value}`` (or ``{"Ref": value}``)."""
    key = tag_name if tag_name in ("Ref", "Condition") else f"Fn::{tag_name}"

    def construct(loader: yaml.SafeLoader, node: yaml.Node) -> dict[str, Any]:
        value: Any
        if isinstance(node, yaml.ScalarNode):
            value = loader.construct_scalar(node)
            if tag_name == "GetAtt" and isinstance(value, str):
                value = value.split(".", 1)  # !GetAtt A.B  ==  Fn::GetAtt: [A, B]
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        elif isinstance(node, yaml.MappingNode):
            value = loader.construct_mapping(node, deep=True)
        else:
            raise yaml.constructor.ConstructorError(
                None, None, f"unexpected node for !{tag_name}", node.start_mark
            )
        return {key: value}

    return construct


for _tag in (*_FN_TAGS, "Ref", "Condition", "GetAtt"):
    CfnLoader.add_constructor(f"!{_tag}", _construct(_tag))


def load_template(path: Path) -> dict[str, Any]:
    """Parse a template file into plain dicts (intrinsics in their long form)."""
    try:
        data = yaml.load(path.read_text(), Loader=CfnLoader)
    except (OSError, yaml.YAMLError) as exc:
        raise TemplateError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("Resources"), dict):
        raise TemplateError(f"{path} has no Resources section")
    return data


def find_template(start: Path | None = None) -> Path:
    """``start`` if it is a file; else template.yaml in ``start`` (default: the working
    directory) or its nearest parent; failing that, the repository holding this package."""
    if start is not None and start.is_file():
        return start.resolve()
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / TEMPLATE_NAME).is_file():
            return directory / TEMPLATE_NAME
    fallback = Path(__file__).resolve().parents[2] / TEMPLATE_NAME
    if fallback.is_file():
        return fallback
    raise TemplateError(f"no {TEMPLATE_NAME} found in {here} or its parents")


# ---- resolving ----------------------------------------------------------------------------------
@dataclass
class Resolver:
    """Evaluates intrinsic functions against local values.

    ``refs`` maps a logical id or parameter name to what ``Ref`` returns; ``attrs`` maps
    ``(logical id, attribute)`` to what ``Fn::GetAtt`` returns. Unknown references raise, so a
    template change the local stack does not understand is reported instead of guessed.
    """

    refs: dict[str, Any]
    attrs: dict[tuple[str, str], Any] = field(default_factory=dict)
    conditions: Mapping[str, Any] = field(default_factory=dict)
    mappings: Mapping[str, Any] = field(default_factory=dict)
    region: str = LOCAL_REGION

    def resolve(self, value: Any) -> Any:
        """Resolve every intrinsic in ``value`` (recursively); ``AWS::NoValue`` drops the entry."""
        if isinstance(value, list):
            items = [self.resolve(v) for v in value]
            return [v for v in items if v is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self.ref(arg)
            if key.startswith("Fn::"):
                return self._function(key[4:], arg)
            if key == "Condition" and isinstance(arg, str):
                return self.condition(arg)
        resolved = {k: self.resolve(v) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not NO_VALUE}

    def ref(self, name: str) -> Any:
        """What ``Ref`` of a parameter, pseudo parameter or resource returns locally."""
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.refs:
            return self.refs[name]
        raise TemplateError(f"Ref to {name!r} has no local value")

    def get_att(self, logical_id: str, attribute: str) -> Any:
        """What ``Fn::GetAtt`` returns locally."""
        try:
            return self.attrs[(logical_id, attribute)]
        except KeyError:
            raise TemplateError(f"Fn::GetAtt {logical_id}.{attribute} has no local value") from None

    def condition(self, name: str) -> bool:
        """Evaluate a named condition from the template's Conditions section."""
        if name not in self.conditions:
            raise TemplateError(f"unknown condition {name!r}")
        return bool(self.resolve(self.conditions[name]))

    def sub(self, arg: str | list[Any]) -> str:
        """``Fn::Sub`` in both forms; ``${!Literal}`` stays ``${Literal}``."""
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return str(variables[name])
            if "." in name and not name.startswith("AWS::"):
                return str(self.get_att(*name.split(".", 1)))
            return str(self.ref(name))

        return re.sub(r"\$\{([^}]+)\}", replace, text)

    def _function(self, name: str, arg: Any) -> Any:
        """Dispatch one ``Fn::<name>`` call."""
        handlers: dict[str, Callable[[Any], Any]] = {
            "Sub": self.sub,
            "GetAtt": lambda a: self.get_att(*(a.split(".", 1) if isinstance(a, str) else a)),
            "Join": lambda a: str(a[0]).join(str(v) for v in self.resolve(a[1])),
            "Select": lambda a: self.resolve(a[1])[int(self.resolve(a[0]))],
            "Split": lambda a: str(self.resolve(a[1])).split(a[0]),
            "If": lambda a: self.resolve(a[1] if self.condition(a[0]) else a[2]),
            "Equals": lambda a: self.resolve(a[0]) == self.resolve(a[1]),
            "Not": lambda a: not self.resolve(a[0]),
            "And": lambda a: all(self.resolve(v) for v in a),
            "Or": lambda a: any(self.resolve(v) for v in a),
            "FindInMap": lambda a: self.mappings[self.resolve(a[0])][self.resolve(a[1])][self.resolve(a[2])],
            "GetAZs": lambda _a: [f"{self.region}{z}" for z in "abc"],
            "Base64": lambda a: self.resolve(a),
        }
        if name not in handlers:
            raise TemplateError(f"Fn::{name} is not supported by the local stack")
        return handlers[name](arg)


# ---- the questions the local stack asks ---------------------------------------------------------
@dataclass(frozen=True)
class FunctionSpec:
    """One AWS::Serverless::Function as the local invoker needs it."""

    logical_id: str
    code_dir: Path
    module: str
    attribute: str
    environment: dict[str, str]
    layer_dirs: tuple[Path, ...]
    timeout_s: int
    memory_mb: int

    @property
    def handler_file(self) -> Path:
        return self.code_dir / (self.module.replace(".", "/") + ".py")


@dataclass(frozen=True)
class ApiRoute:
    """One ``Type: Api`` event: API Gateway path (with ``{param}`` segments), method, function."""

    api_id: str | None
    path: str
    method: str
    function: str
    api_key_required: bool


@dataclass(frozen=True)
class SqsSource:
    """One ``Type: SQS`` event source mapping."""

    function: str
    queue: str
    batch_size: int
    window_s: int
    report_batch_item_failures: bool


@dataclass(frozen=True)
class QueueSpec:
    """An AWS::SQS::Queue with its resolved properties (name, attributes, DLQ)."""

    logical_id: str
    name: str
    attributes: dict[str, str]
    dead_letter_queue: str | None
    max_receive_count: int | None


# Queue properties that map 1:1 onto SQS attributes.
_QUEUE_ATTRIBUTES = (
    "DelaySeconds", "MaximumMessageSize", "MessageRetentionPeriod", "ReceiveMessageWaitTimeSeconds",
    "VisibilityTimeout", "SqsManagedSseEnabled", "FifoQueue", "ContentBasedDeduplication",
)  # fmt: skip


class Template:
    """A parsed template plus the local physical values its intrinsics resolve to."""

    def __init__(
        self,
        path: Path,
        *,
        parameters: Mapping[str, str] | None = None,
        region: str = LOCAL_REGION,
        account_id: str = LOCAL_ACCOUNT_ID,
        stack_name: str = LOCAL_STACK_NAME,
    ) -> None:
        self.path = path.resolve()
        self.root = self.path.parent
        self.data = load_template(self.path)
        self.region = region
        self.account_id = account_id
        self.stack_name = stack_name
        self.resources: dict[str, dict[str, Any]] = self.data["Resources"]
        self.resolver = Resolver(
            refs=self._parameter_values(parameters or {}),
            conditions=self.data.get("Conditions") or {},
            mappings=self.data.get("Mappings") or {},
            region=region,
        )
        self._assign_physical_values()

    # -- physical values ----------------------------------------------------------------------
    def _parameter_values(self, overrides: Mapping[str, str]) -> dict[str, Any]:
        """Pseudo parameters plus each parameter's override or default."""
        stack_id = f"arn:aws:cloudformation:{self.region}:{self.account_id}:stack/{self.stack_name}/local"
        values: dict[str, Any] = {
            "AWS::Region": self.region,
            "AWS::AccountId": self.account_id,
            "AWS::Partition": "aws",
            "AWS::StackName": self.stack_name,
            "AWS::StackId": stack_id,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": NO_VALUE,
        }
        for name, spec in (self.data.get("Parameters") or {}).items():
            if name in overrides:
                values[name] = overrides[name]
            elif isinstance(spec, dict) and "Default" in spec:
                values[name] = spec["Default"]
            else:
                raise TemplateError(f"parameter {name} has no Default; pass a local value for it")
        return values

    def _assign_physical_values(self) -> None:
        """Give each resource the Ref/GetAtt values it would have once deployed (locally named)."""
        arn = f"arn:aws:{{}}:{self.region}:{self.account_id}:{{}}"
        for logical_id, resource in self.resources.items():
            kind = resource.get("Type", "")
            props = resource.get("Properties") or {}
            refs, attrs = self.resolver.refs, self.resolver.attrs
            if kind == "AWS::S3::Bucket":
                name = self._name(props.get("BucketName"), logical_id, lower=True)
                refs[logical_id] = name
                attrs[(logical_id, "Arn")] = f"arn:aws:s3:::{name}"
                attrs[(logical_id, "DomainName")] = f"{name}.s3.amazonaws.com"
                attrs[(logical_id, "RegionalDomainName")] = f"{name}.s3.{self.region}.amazonaws.com"
            elif kind == "AWS::SQS::Queue":
                name = self._name(props.get("QueueName"), logical_id)
                refs[logical_id] = f"https://sqs.{self.region}.amazonaws.com/{self.account_id}/{name}"
                attrs[(logical_id, "Arn")] = arn.format("sqs", name)
                attrs[(logical_id, "QueueName")] = name
                attrs[(logical_id, "QueueUrl")] = refs[logical_id]
            elif kind == "AWS::Glue::Database":
                refs[logical_id] = self._name((props.get("DatabaseInput") or {}).get("Name"), logical_id)
            elif kind == "AWS::Glue::Table":
                refs[logical_id] = self._name((props.get("TableInput") or {}).get("Name"), logical_id)
            elif kind == "AWS::Athena::WorkGroup":
                refs[logical_id] = self._name(props.get("Name"), logical_id)
            elif kind == "AWS::Serverless::Function":
                name = self._name(props.get("FunctionName"), logical_id)
                refs[logical_id] = name
                attrs[(logical_id, "Arn")] = arn.format("lambda", f"function:{name}")
            elif kind in ("AWS::Serverless::Api", "AWS::ApiGateway::RestApi"):
                refs[logical_id] = "local"
                attrs[(logical_id, "RootResourceId")] = "root"
            else:
                refs.setdefault(logical_id, f"{self.stack_name}-{logical_id}")
                attrs.setdefault((logical_id, "Arn"), arn.format("local", logical_id))

    def _name(self, declared: Any, logical_id: str, *, lower: bool = False) -> str:
        """A resource's declared name, resolved; else a CloudFormation-style generated one."""
        if declared is not None:
            return str(self.resolver.resolve(declared))
        name = f"{self.stack_name}-{logical_id}"
        return name.lower() if lower else name

    def set_queue_url(self, logical_id: str, url: str) -> None:
        """Record a queue's real (local) URL once it exists, so Refs resolve to it."""
        self.resolver.refs[logical_id] = url
        self.resolver.attrs[(logical_id, "QueueUrl")] = url

    def resolve(self, value: Any) -> Any:
        return self.resolver.resolve(value)

    def ref(self, logical_id: str) -> Any:
        return self.resolver.ref(logical_id)

    # -- resource queries ---------------------------------------------------------------------
    def of_type(self, *kinds: str) -> dict[str, dict[str, Any]]:
        """Resources of the given types (unresolved), in template order."""
        return {lid: r for lid, r in self.resources.items() if r.get("Type") in kinds}

    def properties(self, logical_id: str) -> dict[str, Any]:
        """A resource's properties with every intrinsic resolved."""
        resolved = self.resolve(self.resources[logical_id].get("Properties") or {})
        return resolved if isinstance(resolved, dict) else {}

    def _function_globals(self) -> dict[str, Any]:
        return ((self.data.get("Globals") or {}).get("Function")) or {}

    def functions(self) -> dict[str, FunctionSpec]:
        """Every serverless function, with Globals merged in (function values win)."""
        globals_ = self._function_globals()
        specs: dict[str, FunctionSpec] = {}
        for logical_id in self.of_type("AWS::Serverless::Function"):
            props = self.resources[logical_id].get("Properties") or {}
            handler = str(self.resolve(props.get("Handler") or globals_.get("Handler") or ""))
            module, _, attribute = handler.rpartition(".")
            if not module:
                raise TemplateError(f"{logical_id}: Handler {handler!r} is not module.function")
            code_uri = self.resolve(props.get("CodeUri") or globals_.get("CodeUri") or ".")
            specs[logical_id] = FunctionSpec(
                logical_id=logical_id,
                code_dir=(self.root / str(code_uri)).resolve(),
                module=module,
                attribute=attribute,
                environment=self.function_environment(logical_id),
                layer_dirs=self._layer_dirs(globals_.get("Layers", []) + props.get("Layers", [])),
                timeout_s=int(self.resolve(props.get("Timeout", globals_.get("Timeout", 3)))),
                memory_mb=int(self.resolve(props.get("MemorySize", globals_.get("MemorySize", 128)))),
            )
        return specs

    def function_environment(self, logical_id: str) -> dict[str, str]:
        """Globals.Function.Environment.Variables merged with the function's own, resolved."""
        global_vars = ((self._function_globals().get("Environment") or {}).get("Variables")) or {}
        props = self.resources[logical_id].get("Properties") or {}
        own_vars = ((props.get("Environment") or {}).get("Variables")) or {}
        merged = self.resolve({**global_vars, **own_vars})
        return {str(k): _env_string(v) for k, v in merged.items()}

    def _layer_dirs(self, layers: list[Any]) -> tuple[Path, ...]:
        """ContentUri directories of the function's template-defined layers (ARNs are skipped)."""
        dirs: list[Path] = []
        for layer in layers:
            if isinstance(layer, dict) and isinstance(layer.get("Ref"), str):
                resource = self.resources.get(layer["Ref"]) or {}
                content = (resource.get("Properties") or {}).get("ContentUri")
                if isinstance(content, str):
                    dirs.append((self.root / content).resolve())
        return tuple(dirs)

    def _api_default_key_required(self, api_id: str | None) -> bool:
        """ApiKeyRequired from the Api resource's Auth, else Globals.Api.Auth, else False."""
        api_auth: dict[str, Any] = {}
        if api_id and api_id in self.resources:
            api_auth = (self.resources[api_id].get("Properties") or {}).get("Auth") or {}
        globals_auth = (((self.data.get("Globals") or {}).get("Api")) or {}).get("Auth") or {}
        return bool(self.resolve(api_auth.get("ApiKeyRequired", globals_auth.get("ApiKeyRequired", False))))

    def _events(self, kind: str) -> list[tuple[str, str, dict[str, Any]]]:
        """(function, event name, unresolved properties) for each function event of ``kind``."""
        found = []
        for logical_id, resource in self.of_type("AWS::Serverless::Function").items():
            for name, event in ((resource.get("Properties") or {}).get("Events") or {}).items():
                if isinstance(event, dict) and event.get("Type") == kind:
                    found.append((logical_id, name, event.get("Properties") or {}))
        return found

    def api_routes(self) -> list[ApiRoute]:
        """Every ``Type: Api`` event; the route's Auth.ApiKeyRequired overrides the Api's."""
        routes = []
        for function, _name, props in self._events("Api"):
            rest_api = props.get("RestApiId")
            api_id = rest_api.get("Ref") if isinstance(rest_api, dict) else None
            auth = props.get("Auth") or {}
            required = (
                bool(self.resolve(auth["ApiKeyRequired"]))
                if "ApiKeyRequired" in auth
                else self._api_default_key_required(api_id)
            )
            routes.append(
                ApiRoute(
                    api_id=api_id,
                    path=str(self.resolve(props["Path"])),
                    method=str(self.resolve(props["Method"])).upper(),
                    function=function,
                    api_key_required=required,
                )
            )
        return routes

    def api_stage(self, api_id: str | None) -> str:
        """The Api resource's StageName (what ``requestContext.stage`` carries)."""
        if api_id and api_id in self.resources:
            stage = self.properties(api_id).get("StageName")
            if stage:
                return str(stage)
        return "Prod"  # SAM's implicit API stage

    def api_binary_media_types(self, api_id: str | None) -> list[str]:
        """BinaryMediaTypes of the Api (``~1`` is SAM's escape for ``/``)."""
        if not api_id or api_id not in self.resources:
            return []
        types = self.properties(api_id).get("BinaryMediaTypes") or []
        return [str(t).replace("~1", "/") for t in types]

    def api_usage_plan(self, api_id: str | None) -> dict[str, Any]:
        """The Api's Auth.UsagePlan block (throttle and quota), resolved; empty if none."""
        if not api_id or api_id not in self.resources:
            return {}
        return dict(((self.properties(api_id).get("Auth") or {}).get("UsagePlan")) or {})

    def sqs_sources(self) -> list[SqsSource]:
        """Every ``Type: SQS`` event source, with the queue's logical id."""
        sources = []
        queue_ids = {self.resolver.attrs.get((q, "Arn")): q for q in self.of_type("AWS::SQS::Queue")}
        for function, name, props in self._events("SQS"):
            arn = self.resolve(props["Queue"])
            if arn not in queue_ids:
                raise TemplateError(f"{function}.{name}: queue {arn} is not defined in the template")
            sources.append(
                SqsSource(
                    function=function,
                    queue=queue_ids[arn],
                    batch_size=int(self.resolve(props.get("BatchSize", 10))),
                    window_s=int(self.resolve(props.get("MaximumBatchingWindowInSeconds", 0))),
                    report_batch_item_failures="ReportBatchItemFailures"
                    in (self.resolve(props.get("FunctionResponseTypes")) or []),
                )
            )
        return sources

    def queues(self) -> list[QueueSpec]:
        """Queues in dependency order: dead-letter queues before the queues that use them."""
        arns = {self.resolver.attrs[(q, "Arn")]: q for q in self.of_type("AWS::SQS::Queue")}
        specs = []
        for logical_id in self.of_type("AWS::SQS::Queue"):
            props = self.properties(logical_id)
            redrive = props.get("RedrivePolicy") or {}
            dlq = arns.get(redrive.get("deadLetterTargetArn"))
            specs.append(
                QueueSpec(
                    logical_id=logical_id,
                    name=self.resolver.attrs[(logical_id, "QueueName")],
                    attributes={k: _env_string(props[k]) for k in _QUEUE_ATTRIBUTES if k in props},
                    dead_letter_queue=dlq,
                    max_receive_count=int(redrive["maxReceiveCount"]) if redrive else None,
                )
            )
        return sorted(specs, key=lambda q: q.dead_letter_queue is not None)

    def buckets(self) -> dict[str, dict[str, Any]]:
        """Bucket logical id → resolved properties (the name is ``ref(logical_id)``)."""
        return {lid: self.properties(lid) for lid in self.of_type("AWS::S3::Bucket")}

    def glue_databases(self) -> dict[str, dict[str, Any]]:
        """Database logical id → resolved DatabaseInput."""
        return {lid: self.properties(lid)["DatabaseInput"] for lid in self.of_type("AWS::Glue::Database")}

    def glue_tables(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Table logical id → (database name, resolved TableInput)."""
        return {
            lid: (str(props["DatabaseName"]), props["TableInput"])
            for lid in self.of_type("AWS::Glue::Table")
            for props in [self.properties(lid)]
        }

    def athena_workgroups(self) -> dict[str, dict[str, Any]]:
        """Workgroup logical id → resolved properties."""
        return {lid: self.properties(lid) for lid in self.of_type("AWS::Athena::WorkGroup")}


def _env_string(value: Any) -> str:
    """Lambda environment values and SQS attributes are strings (YAML booleans become 'true')."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
