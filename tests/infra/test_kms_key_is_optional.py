"""Without KmsKeyArn the stack is the stack it was before the parameter existed: the template,
its Fn::If on HasKmsKey decided as false, renders every resource and output property for
property as the template of BASELINE does (the commit before the key came in), read from git.

When a later change alters these resources on purpose, BASELINE moves to that change's commit
(both sides are rendered without a key, so a baseline that has the parameter works as well).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.infra.cfn_conditions import with_condition
from tests.infra.cfn_yaml import REPO_ROOT, TEMPLATE_PATH, load_cfn_yaml, load_template

#: The last commit whose template had no KmsKeyArn.
BASELINE = "db26453c870a02243a6a2d92c704b5966f8cce57"


def without_a_key(template: dict[str, Any]) -> dict[str, Any]:
    if "HasKmsKey" in template.get("Conditions", {}):
        return with_condition(template, "HasKmsKey", False)
    return template


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = TEMPLATE_PATH.relative_to(REPO_ROOT).as_posix()
    shown = subprocess.run(
        ["git", "show", f"{BASELINE}:{path}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if shown.returncode != 0:
        missing = f"the baseline template is not in this checkout's git history: {shown.stderr}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing} (CI=true: a clean clone has it)")
        pytest.skip(missing)
    copy = Path(tmp_path_factory.mktemp("baseline")) / "converse-stage.yaml"
    copy.write_text(shown.stdout, encoding="utf-8")
    return without_a_key(load_cfn_yaml(copy))


@pytest.fixture(scope="module")
def current() -> dict[str, Any]:
    return without_a_key(load_template())


def test_the_same_resources_of_the_same_types(
    baseline: dict[str, Any], current: dict[str, Any]
) -> None:
    assert {k: r["Type"] for k, r in current["Resources"].items()} == {
        k: r["Type"] for k, r in baseline["Resources"].items()
    }


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
    added = set(current["Parameters"]) - set(baseline["Parameters"])
    assert added == {"KmsKeyArn"}
    assert current["Parameters"]["KmsKeyArn"]["Default"] == ""
    assert {k: v for k, v in current["Parameters"].items() if k != "KmsKeyArn"} == baseline[
        "Parameters"
    ]
