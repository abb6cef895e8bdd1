"""The pipeline template (infra/cloudformation/pipeline-resources.yaml): the history table, the
model queue (standard or FIFO) and the compaction queue, each queue with its dead-letter
queue, for a stack of their own; every property the contract and the converse stage depend
on pinned, read from the YAML as written; its outputs what the converse stack takes."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.infra.cfn_conditions import evaluate_conditions, parameter_values, with_conditions
from tests.infra.cfn_outputs import JOINED, PIPELINE_OUTPUTS
from tests.infra.cfn_stack import ConcreteStack
from tests.infra.cfn_tables import assert_the_table_bootstrap_makes
from tests.infra.cfn_yaml import (
    load_pipeline_template,
    load_template,
    parameter_default,
    properties,
)
from worker.app.resources import (
    DEAD_LETTER_RETENTION_SECONDS,
    MAX_RECEIVE_COUNT,
    SOURCE_RETENTION_SECONDS,
    Resources,
    dead_letter_name,
)

DEAD_LETTER_QUEUE_OF = {
    "ModelQueue": "ModelDeadLetterQueue",
    "CompactionQueue": "CompactionDeadLetterQueue",
}
QUEUES = [*DEAD_LETTER_QUEUE_OF, *DEAD_LETTER_QUEUE_OF.values()]
KEY = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def as_a_stack_gets_it(given: dict[str, str] | None = None) -> dict[str, Any]:
    """The template as a stack given ``given`` (``NamePrefix`` mira, defaults elsewhere)
    gets it: every condition decided but HasAlarmTopic."""
    document = load_pipeline_template()
    values = parameter_values(document, {"NamePrefix": "mira", **(given or {})})
    decided = evaluate_conditions(document, values)
    del decided["HasAlarmTopic"]
    return with_conditions(document, decided)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return as_a_stack_gets_it()


def names(given: dict[str, str]) -> dict[str, str]:
    """Each resource's name for a stack given ``given`` (NamePrefix included)."""
    stack = ConcreteStack(template=load_pipeline_template(), parameters=given)
    values = stack.values()
    return {
        logical_id: values[f"{logical_id}.QueueName"]
        if "Queue" in logical_id
        else values[logical_id]
        for logical_id in ["HistoryTable", *QUEUES]
    }


def test_the_stack_holds_the_table_the_queues_and_the_owners_alarms(
    template: dict[str, Any],
) -> None:
    by_type: dict[str, set[str]] = {}
    for logical_id, resource in template["Resources"].items():
        by_type.setdefault(resource["Type"], set()).add(logical_id)
    assert by_type == {
        "AWS::DynamoDB::Table": {"HistoryTable"},
        "AWS::SQS::Queue": set(QUEUES),
        "AWS::CloudWatch::Alarm": {"ModelDeadLetterAlarm", "CompactionDeadLetterAlarm"},
    }


@pytest.mark.parametrize("logical_id", ["HistoryTable", *QUEUES])
def test_every_table_and_queue_outlives_the_stack_and_a_replacement(
    template: dict[str, Any], logical_id: str
) -> None:
    """The history is other stages' record of privileged conversations, the queues hold
    their work in flight; resource import also needs a DeletionPolicy on each."""
    resource = template["Resources"][logical_id]
    assert resource["DeletionPolicy"] == "Retain"
    assert resource["UpdateReplacePolicy"] == "Retain"


def test_the_history_table_matches_the_contract(template: dict[str, Any]) -> None:
    """As the all-in-one stack had it: the previous release's cmd# records expire by the
    TTL on ``expires_at``."""
    assert_the_table_bootstrap_makes(properties(template, "HistoryTable"))


@pytest.mark.parametrize(("queue", "dead_letter_queue"), DEAD_LETTER_QUEUE_OF.items())
def test_every_queue_redrives_to_its_own_dead_letter_queue_which_outlives_it(
    template: dict[str, Any], queue: str, dead_letter_queue: str
) -> None:
    source = properties(template, queue)
    assert source["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dead_letter_queue, "Arn"]},
        "maxReceiveCount": {"Ref": "MaxReceiveCount"},
    }
    assert source["MessageRetentionPeriod"] == {"Ref": "SourceRetentionSeconds"}
    assert properties(template, dead_letter_queue)["MessageRetentionPeriod"] == (
        DEAD_LETTER_RETENTION_SECONDS
    )
    assert "RedrivePolicy" not in properties(template, dead_letter_queue)
    assert parameter_default(template, "MaxReceiveCount") == MAX_RECEIVE_COUNT
    assert parameter_default(template, "SourceRetentionSeconds") == SOURCE_RETENTION_SECONDS
    assert int(template["Parameters"]["SourceRetentionSeconds"]["MaxValue"]) == 7 * 86_400


@pytest.mark.parametrize(
    ("queue", "parameter"),
    [("ModelQueue", "ModelVisibilityTimeout"), ("CompactionQueue", "CompactionVisibilityTimeout")],
)
def test_the_consumers_visibility_timeouts_are_parameters_here(
    template: dict[str, Any], queue: str, parameter: str
) -> None:
    """The model stage's and the compactor's: set by whoever runs their queues, never by the
    converse stack."""
    assert properties(template, queue)["VisibilityTimeout"] == {"Ref": parameter}
    assert parameter not in load_template()["Parameters"]


@pytest.mark.parametrize("queue", QUEUES)
def test_every_queue_is_encrypted_and_with_a_key_under_it(
    template: dict[str, Any], queue: str
) -> None:
    assert properties(template, queue)["SqsManagedSseEnabled"] is True
    keyed = properties(as_a_stack_gets_it({"KmsKeyArn": KEY}), queue)
    assert "SqsManagedSseEnabled" not in keyed
    assert keyed["KmsMasterKeyId"] == {"Ref": "KmsKeyArn"}
    assert keyed["KmsDataKeyReusePeriodSeconds"] == 300


def test_with_a_key_the_history_table_is_under_it() -> None:
    keyed = as_a_stack_gets_it({"KmsKeyArn": KEY})
    assert properties(keyed, "HistoryTable")["SSESpecification"] == {
        "SSEEnabled": True,
        "SSEType": "KMS",
        "KMSMasterKeyId": {"Ref": "KmsKeyArn"},
    }


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
def test_names_follow_bootstrap_for_a_standard_or_a_fifo_model_queue(fifo: bool) -> None:
    resources = Resources(prefix="mira", fifo_model_queue=fifo)
    named = names({"NamePrefix": "mira", "ModelQueueType": "fifo" if fifo else "standard"})
    by_env = {spec.env: spec.name for spec in resources.queues}
    assert named["HistoryTable"] == resources.table
    assert named["ModelQueue"] == by_env["MODEL_QUEUE_URL"]
    assert named["ModelDeadLetterQueue"] == dead_letter_name(by_env["MODEL_QUEUE_URL"])
    assert named["CompactionQueue"] == by_env["COMPACTION_QUEUE_URL"]
    assert named["CompactionDeadLetterQueue"] == dead_letter_name(by_env["COMPACTION_QUEUE_URL"])


def test_a_fifo_model_queue_and_its_dead_letter_queue_are_both_fifo() -> None:
    """SQS requires a FIFO queue's dead-letter queue to be FIFO; the compaction queue stays
    standard."""
    fifo = as_a_stack_gets_it({"ModelQueueType": "fifo"})
    standard = as_a_stack_gets_it()
    for queue in ("ModelQueue", "ModelDeadLetterQueue"):
        assert properties(fifo, queue)["FifoQueue"] is True
        assert "FifoQueue" not in properties(standard, queue)
    for queue in ("CompactionQueue", "CompactionDeadLetterQueue"):
        assert "FifoQueue" not in properties(fifo, queue)


def test_the_longest_name_a_prefix_allows_is_one_sqs_takes() -> None:
    """SQS names are at most 80 characters, a FIFO queue's ``.fifo`` included."""
    pattern = load_pipeline_template()["Parameters"]["NamePrefix"]["AllowedPattern"]
    longest = "p" * 60
    assert re.fullmatch(pattern, longest) and not re.fullmatch(pattern, longest + "p")
    named = names({"NamePrefix": longest, "ModelQueueType": "fifo"})
    assert (
        max(len(name) for logical_id, name in named.items() if logical_id != "HistoryTable") <= 80
    )


@pytest.mark.parametrize("dead_letter_queue", DEAD_LETTER_QUEUE_OF.values())
def test_any_message_in_a_dead_letter_queue_raises_its_owners_alarm(
    template: dict[str, Any], dead_letter_queue: str
) -> None:
    (alarm,) = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm"
        and r["Properties"]["Dimensions"]
        == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [dead_letter_queue, "QueueName"]}}]
    ]
    assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0)


def test_the_outputs_are_what_the_converse_stack_takes(template: dict[str, Any]) -> None:
    """Each joined ARN, under the name of the converse parameter that takes it, in the form
    its pattern accepts (tests/infra/test_cloudformation_deploy.py checks the deployed
    values against it)."""
    assert set(template["Outputs"]) == PIPELINE_OUTPUTS
    converse = load_template()["Parameters"]
    assert set(JOINED) <= set(converse)
    assert template["Outputs"]["HistoryTableArn"]["Value"] == {
        "Fn::GetAtt": ["HistoryTable", "Arn"]
    }
    assert template["Outputs"]["ModelQueueArn"]["Value"] == {"Fn::GetAtt": ["ModelQueue", "Arn"]}
    assert template["Outputs"]["CompactionQueueArn"]["Value"] == {
        "Fn::GetAtt": ["CompactionQueue", "Arn"]
    }
    stack = ConcreteStack(
        template=load_pipeline_template(),
        parameters={"NamePrefix": "mira", "ModelQueueType": "fifo"},
    )
    for name in JOINED:
        value = stack.resolve(stack.template["Outputs"][name]["Value"])
        assert re.fullmatch(converse[name]["AllowedPattern"], value), (name, value)


def test_adopting_leaves_out_what_an_import_may_not_add() -> None:
    """The IMPORT change set that adopts the all-in-one stack's table and queues may add
    neither outputs nor resources it does not import (docs/DEPLOY.md): with Adopting, the
    stack is those five resources and nothing else; the next update adds the rest."""
    adopting = as_a_stack_gets_it({"Adopting": "true"})
    assert set(adopting["Resources"]) == {"HistoryTable", *QUEUES}
    assert adopting.get("Outputs", {}) == {}
    assert parameter_default(load_pipeline_template(), "Adopting") == "false"
