"""The stage's role grants exactly the rights docs/CONTRACT.md gives it, resource by resource.

The page's table of the rights as IAM actions ("Resources and rights": resource, actions, why,
in the template: a resource the stack makes, or the parameter naming one it joins) is read row
by row: on each, the task role's policy (the stack at its default parameters, every condition
decided) must grant exactly the row's actions; the role may grant nothing on a resource or
parameter of the template the table does not name. The update the
role may make on the history table is limited, by the condition key ``dynamodb:Attributes``, to
the attributes of ``state`` the contract gives the stage, which the page's first table names.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests import contract_page as page
from tests.infra.cfn_conditions import render
from tests.infra.cfn_yaml import load_template

SECTION = "Resources and rights"
#: An IAM action as the page spells it in code: ``service:Action``.
_ACTION = re.compile(r"(sqs|dynamodb|s3|kms):[A-Z]\w+")
#: A ``${Name}`` or ``${Name.Attribute}`` in an ``Fn::Sub`` string.
_SUB_REFERENCE = re.compile(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z0-9.]+)?\}")
#: The history table's key attributes: IAM's ``dynamodb:Attributes`` must list them with any
#: attribute it allows (the DynamoDB Developer Guide, fine-grained access control).
KEY_ATTRIBUTES = {"pk", "sk"}


def rights_rows() -> tuple[dict[str, str], ...]:
    return page.table(SECTION, "resource", "actions")


def page_actions(row: dict[str, str]) -> set[str]:
    return {span for span in page.code_spans(row["actions"]) if _ACTION.fullmatch(span)}


def statements(template: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The Allow statements of the task role's policies."""
    role = template["Resources"]["TaskRole"]["Properties"]
    for policy in role["Policies"]:
        for statement in policy["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow", statement.get("Sid")
            yield statement


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def referenced(value: Any, resources: set[str]) -> set[str]:
    """The stack's resources and parameters (logical ids) a ``Resource`` expression refers to."""
    if isinstance(value, list):
        return set().union(*(referenced(item, resources) for item in value))
    if isinstance(value, str):
        return {name for name in _SUB_REFERENCE.findall(value) if name in resources}
    if not isinstance(value, dict):
        return set()
    if set(value) == {"Ref"}:
        return {value["Ref"]} & resources
    if set(value) == {"Fn::GetAtt"}:
        target = value["Fn::GetAtt"]
        logical_id = target[0] if isinstance(target, list) else target.split(".")[0]
        return {logical_id} & resources
    return set().union(*(referenced(item, resources) for item in value.values()))


def named(template: dict[str, Any]) -> set[str]:
    """What a ``Resource`` may name: the stack's resources and the template's parameters."""
    return set(template["Resources"]) | set(template.get("Parameters", {}))


def granted(template: dict[str, Any]) -> dict[str, set[str]]:
    """Each resource or joined resource's parameter the role names, with the actions it
    grants on it."""
    resources = named(template)
    on: dict[str, set[str]] = {}
    for statement in statements(template):
        for logical_id in referenced(statement["Resource"], resources):
            on.setdefault(logical_id, set()).update(as_list(statement["Action"]))
    return on


@pytest.fixture(scope="module")
def stack() -> dict[str, Any]:
    return render(load_template())


@pytest.mark.parametrize("row", rights_rows(), ids=lambda row: row["resource"])
def test_on_each_resource_the_role_grants_exactly_the_actions_the_contract_gives(
    stack: dict[str, Any], row: dict[str, str]
) -> None:
    actions = page_actions(row)
    assert actions, f"no action on the page for the {row['resource']}"
    [logical_id] = page.code_spans(row["in the template"])
    assert granted(stack).get(logical_id, set()) == actions


def test_the_role_grants_nothing_on_a_resource_the_contract_does_not_name(
    stack: dict[str, Any],
) -> None:
    on_the_page = {
        span for row in rights_rows() for span in page.code_spans(row["in the template"])
    }
    assert set(granted(stack)) - on_the_page == set()


def test_the_role_updates_only_the_state_attributes_the_contract_gives_the_stage(
    stack: dict[str, Any],
) -> None:
    [contract_row] = [
        row
        for row in page.table(SECTION, "resource", "owner")
        if row["resource"] == "history table"
    ]
    given = set(page.code_spans(contract_row["the stage's rights"])) - {
        "Query",
        "UpdateItem",
        "state",
    }
    assert len(given) == 7, given
    updates = [
        statement
        for statement in statements(stack)
        if "dynamodb:UpdateItem" in as_list(statement["Action"])
        and "HistoryTableArn" in referenced(statement["Resource"], named(stack))
    ]
    assert updates, "the role grants no UpdateItem on the history table"
    for statement in updates:
        allowed = [
            set(as_list(values))
            for operator, keys in statement.get("Condition", {}).items()
            if operator.startswith("ForAllValues:")
            for key, values in keys.items()
            if key == "dynamodb:Attributes"
        ]
        assert allowed, f"{statement.get('Sid')}: UpdateItem on any attribute of the history"
        assert [attributes - KEY_ATTRIBUTES for attributes in allowed] == [given]
