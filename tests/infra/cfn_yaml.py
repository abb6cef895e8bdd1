"""Read CloudFormation YAML as plain data, with cfn-lint's own loader, and resolve the few
intrinsics the tests need against deployed values.

cfn-lint (already the template's linter) reads short tags into the long form CloudFormation
itself accepts: ``!Ref X`` is ``{"Ref": "X"}``, ``!GetAtt A.B`` is
``{"Fn::GetAtt": ["A", "B"]}``, every other ``!Fn`` is ``{"Fn::Fn": value}``; so a test can
compare against what a JSON template would say. Its mappings and strings are ``dict`` and
``str`` subclasses that remember their line, which nothing here depends on.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cfnlint.decode import cfn_yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_DIR = REPO_ROOT / "infra" / "cloudformation"
TEMPLATE_PATH = TEMPLATE_DIR / "converse-stage.yaml"
#: The resources the converse stage joins, for a stack of their own.
PIPELINE_TEMPLATE_PATH = TEMPLATE_DIR / "pipeline-resources.yaml"
#: The converse stage's own resources without its ECS service (for Kubernetes).
OWN_RESOURCES_TEMPLATE_PATH = TEMPLATE_DIR / "converse-resources.yaml"


def load_cfn_yaml(path: Path) -> dict[str, Any]:
    """Parse one CloudFormation YAML template."""
    document = cfn_yaml.load(str(path))
    if not isinstance(document, dict):
        raise TypeError(f"{path} is not a CloudFormation template (top level is not a mapping)")
    return document


def load_template() -> dict[str, Any]:
    """The converse stage's template."""
    return load_cfn_yaml(TEMPLATE_PATH)


def load_pipeline_template() -> dict[str, Any]:
    """The template of the resources the converse stage joins."""
    return load_cfn_yaml(PIPELINE_TEMPLATE_PATH)


def load_own_resources_template() -> dict[str, Any]:
    """The template of the converse stage's own resources, without its ECS service."""
    return load_cfn_yaml(OWN_RESOURCES_TEMPLATE_PATH)


def parameter_default(template: Mapping[str, Any], name: str) -> Any:
    """A parameter's default, converted to int when the parameter is a Number."""
    parameter = template["Parameters"][name]
    default = parameter["Default"]
    if parameter["Type"] == "Number":
        return int(default)
    return default


def properties(template: Mapping[str, Any], logical_id: str) -> dict[str, Any]:
    """One resource's properties, as written."""
    return dict(template["Resources"][logical_id]["Properties"])


def resolve_intrinsics(value: Any, refs: Mapping[str, Any]) -> Any:
    """Replace ``Ref`` and ``Fn::GetAtt`` with ``refs["X"]`` / ``refs["A.B"]``, recursively.

    Any other intrinsic, or a reference missing from ``refs``, raises: a test must know every
    value it sends.
    """
    if isinstance(value, list):
        return [resolve_intrinsics(item, refs) for item in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Ref"}:
        return refs[value["Ref"]]
    if set(value) == {"Fn::GetAtt"}:
        logical_id, attribute = value["Fn::GetAtt"]
        return refs[f"{logical_id}.{attribute}"]
    intrinsic = [key for key in value if key.startswith("Fn::")]
    if intrinsic:
        raise ValueError(f"cannot resolve {intrinsic[0]} here: {value!r}")
    return {key: resolve_intrinsics(item, refs) for key, item in value.items()}


def reference_name(value: Any) -> str:
    """A readable name for a resource reference: ``ConverseQueue.Arn``, ``PayloadBucket.Arn/*``.

    ``Ref`` gives the logical id, ``GetAtt`` gives ``Id.Attr``, and ``Sub`` gives its string with
    the ``${...}`` braces removed; anything else raises.
    """
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return str(value["Ref"])
    if isinstance(value, dict) and set(value) == {"Fn::GetAtt"}:
        logical_id, attribute = value["Fn::GetAtt"]
        return f"{logical_id}.{attribute}"
    if isinstance(value, dict) and set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
        return value["Fn::Sub"].replace("${", "").replace("}", "")
    raise ValueError(f"not a resource reference: {value!r}")
