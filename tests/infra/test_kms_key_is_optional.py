"""Without KmsKeyArn the stack is the stack it was before the parameter existed: the template,
its Fn::If on HasKmsKey decided as false, renders every resource and output property for
property as the template before the key came in did (``tests/data/converse-stage.before-kms.yaml``,
the template at commit db26453, kept as a file so that a shallow clone checks it too).

Resources and parameters added since for other reasons are named in :data:`ADDED_SINCE`, and
none of them may depend on the key; parameters changed since, in :data:`CHANGED_SINCE`. The
stack compared is the one the baseline made: no key, no model settings, and
PromptCacheMinTokens given the baseline's default.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.cfn_conditions import (
    evaluate_conditions,
    parameter_values,
    with_condition,
    with_conditions,
)
from tests.infra.cfn_yaml import REPO_ROOT, load_cfn_yaml, load_template

#: The template before the key came in.
BASELINE = REPO_ROOT / "tests" / "data" / "converse-stage.before-kms.yaml"
#: What later changes added, unrelated to the key: resource or parameter, and why.
ADDED_SINCE = {
    "UnexplainedCacheMissAlarm": "the bill, observed: unexplained cache misses",
    "UnexplainedCacheMissAlarmPercent": "that alarm's threshold",
    "Dashboard": "the operator's dashboard",
    "ModelId": "the model the model stage calls (MODEL_ID)",
    "ModelPrefixTokens": "the model stage's own prefix (MODEL_PREFIX_TOKENS)",
}
#: Parameters changed since, unrelated to the key: parameter, and why.
CHANGED_SINCE = {
    "PromptCacheMinTokens": "optional: 0 leaves the minimum to ModelId's row of the model table",
    "HistoryCacheTtl": "its description says the worker refuses 1h for a model without it",
}


def without_a_key(template: dict[str, Any]) -> dict[str, Any]:
    if "HasKmsKey" in template.get("Conditions", {}):
        return with_condition(template, "HasKmsKey", False)
    return template


@pytest.fixture(scope="module")
def baseline() -> dict[str, Any]:
    return without_a_key(load_cfn_yaml(BASELINE))


@pytest.fixture(scope="module")
def current(baseline: dict[str, Any]) -> dict[str, Any]:
    """The template as the baseline's stack gets it (every condition but HasAlarmTopic
    decided, as the baseline has only that one)."""
    template = load_template()
    minimum = str(baseline["Parameters"]["PromptCacheMinTokens"]["Default"])
    decided = evaluate_conditions(
        template, parameter_values(template, {"PromptCacheMinTokens": minimum})
    )
    del decided["HasAlarmTopic"]
    return with_conditions(template, decided)


def test_the_same_resources_of_the_same_types(
    baseline: dict[str, Any], current: dict[str, Any]
) -> None:
    resources = {k: r["Type"] for k, r in current["Resources"].items() if k not in ADDED_SINCE}
    assert resources == {k: r["Type"] for k, r in baseline["Resources"].items()}


def test_what_was_added_since_for_other_reasons_does_not_depend_on_the_key() -> None:
    template = load_template()
    added = {**template["Resources"], **template["Parameters"]}
    for name in [*ADDED_SINCE, *CHANGED_SINCE]:
        assert name in added
        assert "KmsKey" not in repr(added[name]), name


def test_every_resource_renders_property_for_property_as_before(
    baseline: dict[str, Any], current: dict[str, Any]
) -> None:
    differences = []
    for logical_id, before in baseline["Resources"].items():
        now = current["Resources"][logical_id]
        for attribute in sorted(set(before) | set(now)):
            if attribute != "Properties" and before.get(attribute) != now.get(attribute):
                differences.append(f"{logical_id} {attribute}")
        properties_before, properties_now = before.get("Properties", {}), now.get("Properties", {})
        for name in sorted(set(properties_before) | set(properties_now)):
            if properties_before.get(name) != properties_now.get(name):
                differences.append(f"{logical_id}.{name}")
    assert differences == []


def test_the_outputs_and_conditions_are_as_before(
    baseline: dict[str, Any], current: dict[str, Any]
) -> None:
    assert current["Outputs"] == baseline["Outputs"]
    assert current["Conditions"] == baseline["Conditions"]


def test_the_one_new_parameter_is_the_key_and_it_defaults_to_none(
    baseline: dict[str, Any], current: dict[str, Any]
) -> None:
    added = set(current["Parameters"]) - set(baseline["Parameters"]) - set(ADDED_SINCE)
    assert added == {"KmsKeyArn"}
    assert current["Parameters"]["KmsKeyArn"]["Default"] == ""
    apart = {"KmsKeyArn", *ADDED_SINCE, *CHANGED_SINCE}
    kept = {k: v for k, v in current["Parameters"].items() if k not in apart}
    assert kept == {k: v for k, v in baseline["Parameters"].items() if k not in apart}
