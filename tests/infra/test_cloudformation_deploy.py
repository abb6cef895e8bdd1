"""The template deploys: moto's CloudFormation creates the queues, table and bucket as declared,
and Application Auto Scaling accepts the template's scaling policy (moto's CloudFormation skips
that resource type, so it goes in through the API)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra.cfn_deploy import aws_client, backlog_scaling_policy, deploy_stack
from tests.infra.cfn_deploy import register_backlog_scaling as register_scaling
from tests.infra.cfn_outputs import DEAD_LETTER_OUTPUT_OF, STACK_OUTPUTS
from worker.app.resources import (
    CONVERSE_VISIBILITY_TIMEOUT,
    DEAD_LETTER_RETENTION_SECONDS,
    MAX_RECEIVE_COUNT,
    SOURCE_RETENTION_SECONDS,
    Resources,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def outputs(moto_endpoint: str) -> dict[str, str]:
    return deploy_stack(moto_endpoint)


def queue_attributes(endpoint: str, queue_url: str) -> dict[str, str]:
    sqs = aws_client("sqs", endpoint)
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])
    return dict(attributes["Attributes"])


def test_the_stack_reports_every_output(outputs: dict[str, str]) -> None:
    assert set(outputs) >= STACK_OUTPUTS
    assert all(outputs.values())


@pytest.fixture(params=DEAD_LETTER_OUTPUT_OF.items(), ids=lambda pair: pair[0])
def queue_and_dead_letter_queue(
    request: pytest.FixtureRequest, moto_endpoint: str, outputs: dict[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """Each deployed queue's attributes, and its dead-letter queue's."""
    queue_output, dead_letter_output = request.param
    return (
        queue_attributes(moto_endpoint, outputs[queue_output]),
        queue_attributes(moto_endpoint, outputs[dead_letter_output]),
    )


def test_each_deployed_queue_redrives_to_its_own_dead_letter_queue(
    queue_and_dead_letter_queue: tuple[dict[str, str], dict[str, str]],
) -> None:
    queue, dead_letter_queue = queue_and_dead_letter_queue
    redrive = json.loads(queue["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"] == dead_letter_queue["QueueArn"]
    assert int(redrive["maxReceiveCount"]) == MAX_RECEIVE_COUNT
    assert queue["SqsManagedSseEnabled"] == "true"
    assert "RedrivePolicy" not in dead_letter_queue


def test_each_deployed_dead_letter_queue_outlives_its_source(
    queue_and_dead_letter_queue: tuple[dict[str, str], dict[str, str]],
) -> None:
    queue, dead_letter_queue = queue_and_dead_letter_queue
    assert int(queue["MessageRetentionPeriod"]) == SOURCE_RETENTION_SECONDS
    assert int(dead_letter_queue["MessageRetentionPeriod"]) == DEAD_LETTER_RETENTION_SECONDS


def test_the_deployed_converse_queue_has_the_default_visibility_timeout(
    moto_endpoint: str, outputs: dict[str, str]
) -> None:
    queue = queue_attributes(moto_endpoint, outputs["ConverseQueueUrl"])
    assert int(queue["VisibilityTimeout"]) == CONVERSE_VISIBILITY_TIMEOUT


def test_a_stack_named_after_the_prefix_names_things_as_bootstrap_does(
    outputs: dict[str, str],
) -> None:
    resources = Resources()
    env_to_output = {
        "CONVERSE_QUEUE_URL": "ConverseQueueUrl",
        "MODEL_QUEUE_URL": "ModelQueueUrl",
        "COMPACTION_QUEUE_URL": "CompactionQueueUrl",
    }
    for spec in resources.queues:
        assert outputs[env_to_output[spec.env]].rsplit("/", 1)[-1] == spec.name
    assert outputs["HistoryTableName"] == resources.table


def test_the_deployed_table_is_keyed_pk_and_sk(moto_endpoint: str, outputs: dict[str, str]) -> None:
    dynamodb = aws_client("dynamodb", moto_endpoint)
    table = dynamodb.describe_table(TableName=outputs["HistoryTableName"])["Table"]
    assert table["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


def test_the_deployed_bucket_exists(moto_endpoint: str, outputs: dict[str, str]) -> None:
    s3 = aws_client("s3", moto_endpoint)
    s3.head_bucket(Bucket=outputs["PayloadBucketName"])  # raises if absent


def test_application_auto_scaling_accepts_the_templates_backlog_policy(
    moto_endpoint: str, outputs: dict[str, str]
) -> None:
    described = register_scaling(moto_endpoint, outputs)
    config: dict[str, Any] = described["TargetTrackingScalingPolicyConfiguration"]
    specification = config["CustomizedMetricSpecification"]
    metrics = {metric["Id"]: metric for metric in specification["Metrics"]}

    assert described["PolicyType"] == backlog_scaling_policy()["Properties"]["PolicyType"]
    assert described["ResourceId"] == f"service/{outputs['ClusterName']}/{outputs['ServiceName']}"
    assert described["ScalableDimension"] == "ecs:service:DesiredCount"
    assert config["TargetValue"] == 100
    assert metrics["e1"]["Expression"] == "m1 / m2"
    assert metrics["e1"]["ReturnData"] is True
    converse_queue = outputs["ConverseQueueUrl"].rsplit("/", 1)[-1]
    assert metrics["m1"]["MetricStat"]["Metric"]["Dimensions"] == [
        {"Name": "QueueName", "Value": converse_queue}
    ]
    assert metrics["m2"]["MetricStat"]["Metric"]["Dimensions"] == [
        {"Name": "ClusterName", "Value": outputs["ClusterName"]},
        {"Name": "ServiceName", "Value": outputs["ServiceName"]},
    ]

    autoscaling = aws_client("application-autoscaling", moto_endpoint)
    (target,) = autoscaling.describe_scalable_targets(
        ServiceNamespace="ecs", ResourceIds=[described["ResourceId"]]
    )["ScalableTargets"]
    assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 20)


def test_the_stack_puts_its_dashboard_with_the_alarms_it_created(
    moto_endpoint: str, outputs: dict[str, str]
) -> None:
    """The dashboard deploys with the stack, its body rendered by CloudFormation: the alarm
    widget shows exactly the alarms the stack created (not the scaling policy's own), and the
    panels the stack's queue."""
    cloudwatch = aws_client("cloudwatch", moto_endpoint)
    (entry,) = cloudwatch.list_dashboards(DashboardNamePrefix="mira-")["DashboardEntries"]
    assert entry["DashboardName"] == "mira-converse-stage"
    body = json.loads(
        cloudwatch.get_dashboard(DashboardName="mira-converse-stage")["DashboardBody"]
    )
    created = {
        alarm["AlarmArn"]
        for alarm in cloudwatch.describe_alarms(AlarmNamePrefix="mira-")["MetricAlarms"]
    }
    (status,) = [widget for widget in body["widgets"] if widget["type"] == "alarm"]
    assert len(created) == 10
    assert set(status["properties"]["alarms"]) == created
    converse_queue = outputs["ConverseQueueUrl"].rsplit("/", 1)[-1]
    first = next(widget for widget in body["widgets"] if widget["type"] == "metric")
    assert first["properties"]["metrics"][0][:4] == [
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        "QueueName",
        converse_queue,
    ]


#: The model's settings, each given: parameter -> (the variable it sets, the value).
MODEL_SETTINGS = {
    "ModelId": ("MODEL_ID", "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"),
    "PromptCacheMinTokens": ("PROMPT_CACHE_MIN_TOKENS", "2048"),
    "ModelPrefixTokens": ("MODEL_PREFIX_TOKENS", "1500"),
}


def test_a_stack_given_the_models_settings_passes_them_to_its_task(moto_endpoint: str) -> None:
    """moto's CloudFormation takes the parameters and puts each in the task definition's
    environment. (Left unset, each variable is absent: tests/infra/test_cloudformation_template.py
    checks that on the rendering, because moto compares a Number parameter with "0" as a number,
    where CloudFormation compares the strings.)"""
    given = {parameter: value for parameter, (_, value) in MODEL_SETTINGS.items()}
    deploy_stack(moto_endpoint, stack_name="given", parameters=given)
    ecs = aws_client("ecs", moto_endpoint)
    task = ecs.describe_task_definition(taskDefinition="given-converse-worker")["taskDefinition"]
    (container,) = task["containerDefinitions"]
    environment = {entry["name"]: entry["value"] for entry in container["environment"]}
    expected = dict(MODEL_SETTINGS.values())
    assert {variable: environment.get(variable) for variable in expected} == expected
