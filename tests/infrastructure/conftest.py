"""Shared fixtures for the template checks: the SAM template as written, and as transformed.

Everything is session-scoped: decoding takes ~0.2 s, the translator ~0.5 s, and every module
reads the same two documents. Nothing here touches ``sys.path``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"

# Local CodeUri/ContentUri values are replaced by these so the translator runs offline.
PLACEHOLDER_BUCKET = "placeholder-bucket"
REGION = "us-east-1"

Template = dict[str, Any]


def _plain(node: Any) -> Any:
    """cfn-lint's decoder returns dict/str subclasses carrying line marks; work on plain JSON."""
    return json.loads(json.dumps(node))


@pytest.fixture(scope="session")
def project_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def sam_template() -> Template:
    """template.yaml as written (short-form tags such as !Ref decoded to their long form)."""
    from cfnlint.decode import decode_str

    template, matches = decode_str(TEMPLATE.read_text(encoding="utf-8"))
    assert not matches, f"template.yaml does not parse: {matches}"
    return _plain(template)


@pytest.fixture(scope="session")
def resources(sam_template: Template) -> dict[str, Any]:
    return sam_template["Resources"]


# Globals lists SAM replaces instead of appending (samtranslator's globals merge rules).
_REPLACED_LISTS = {"Architectures"}


def merge_globals(global_value: Any, local_value: Any, key: str = "") -> Any:
    """SAM's Globals merge: maps merge key by key (the function's value wins on a shared key,
    recursively), lists are appended (Layers), anything else is the function's own value."""
    if isinstance(global_value, dict) and isinstance(local_value, dict):
        merged = dict(global_value)
        for k, v in local_value.items():
            merged[k] = merge_globals(merged[k], v, k) if k in merged else v
        return merged
    if isinstance(global_value, list) and isinstance(local_value, list) and key not in _REPLACED_LISTS:
        return [*global_value, *local_value]
    return local_value


@pytest.fixture(scope="session")
def functions(sam_template: Template) -> dict[str, dict[str, Any]]:
    """Each AWS::Serverless::Function's effective properties: Globals.Function merged with its own
    as SAM does (see :func:`merge_globals`), so Environment.Variables holds both sets."""
    global_props = sam_template.get("Globals", {}).get("Function", {})
    return {
        logical_id: merge_globals(global_props, resource.get("Properties", {}))
        for logical_id, resource in sam_template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }


def with_placeholder_code(template: Template) -> Template:
    """A copy of the template whose local code/layer paths are s3:// placeholders."""
    copy = _plain(template)
    for logical_id, resource in copy["Resources"].items():
        props = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str) and not props[key].startswith("s3://"):
                props[key] = f"s3://{PLACEHOLDER_BUCKET}/{logical_id}.zip"
    return copy


@pytest.fixture(scope="session")
def transformed(sam_template: Template) -> Template:
    """The plain CloudFormation the SAM translator makes of template.yaml (offline, parameter defaults).

    ``passthrough_metadata=True`` copies each SAM resource's Metadata (our checkov skips) onto
    every resource generated from it. Without it SAM keeps Metadata only on the main resource
    (the Lambda function, the RestApi), and the API's caching skip would not reach the Stage.
    """
    import boto3
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    translator = Translator(None, Parser(), boto_session=boto3.Session(region_name=REGION))
    result = translator.translate(
        with_placeholder_code(sam_template),
        parameter_values={},
        passthrough_metadata=True,
        # Only needed for policies named by AWS managed-policy name; we use ARNs and templates.
        get_managed_policy_map=dict,
    )
    return _plain(result)


@pytest.fixture(scope="session")
def transformed_path(transformed: Template, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sam") / "transformed.json"
    path.write_text(json.dumps(transformed, indent=1), encoding="utf-8")
    return path
