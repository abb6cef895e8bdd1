"""The converse stage's own resources without its ECS service
(infra/cloudformation/converse-resources.yaml), for the worker on Kubernetes: the same
resources as converse-stage.yaml's, property for property, with the parameters and conditions
they read, and the outputs the ConfigMap takes; nothing of ECS and nothing joined."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.cfn_outputs import OWN_RESOURCES_OUTPUTS
from tests.infra.cfn_yaml import load_own_resources_template, load_template

#: What the stage owns, whatever runs its worker.
OWN = {
    "ConverseQueue",
    "ConverseDeadLetterQueue",
    "LedgerTable",
    "PayloadBucket",
    "PayloadBucketPolicy",
}


@pytest.fixture(scope="module")
def own() -> dict[str, Any]:
    return load_own_resources_template()


@pytest.fixture(scope="module")
def stage() -> dict[str, Any]:
    return load_template()


def test_it_holds_exactly_the_stages_own_resources(own: dict[str, Any]) -> None:
    assert set(own["Resources"]) == OWN


@pytest.mark.parametrize("logical_id", sorted(OWN))
def test_each_resource_is_the_ecs_stacks_own_property_for_property(
    own: dict[str, Any], stage: dict[str, Any], logical_id: str
) -> None:
    """The same logical id, type, condition and properties: a queue or table made by either
    is the one the other would make, and the k8s IAM policy (infra/k8s/iam) holds for both."""
    assert own["Resources"][logical_id] == stage["Resources"][logical_id]


def test_its_parameters_and_conditions_are_the_ecs_stacks_of_the_same_names(
    own: dict[str, Any], stage: dict[str, Any]
) -> None:
    for name, parameter in own["Parameters"].items():
        assert parameter == stage["Parameters"][name], name
    for name, condition in own["Conditions"].items():
        assert condition == stage["Conditions"][name], name


def test_its_outputs_are_the_configmaps_values_as_the_ecs_stack_names_them(
    own: dict[str, Any], stage: dict[str, Any]
) -> None:
    assert set(own["Outputs"]) == OWN_RESOURCES_OUTPUTS
    for name, output in own["Outputs"].items():
        assert output == stage["Outputs"][name], name
