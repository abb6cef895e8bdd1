"""The templates deploy: moto's CloudFormation creates the pipeline stack's table and queues
(standard or FIFO) and the converse stack's own queues, ledger and bucket as declared, the
converse stack joined to the others by ARN and creating none of them; deleting it leaves them
in place; and Application Auto Scaling accepts the template's scaling policy (moto's
CloudFormation skips that resource type, so it goes in through the API)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.infra.cfn_deploy import (
    aws_client,
    backlog_scaling_policy,
    deploy_converse,
    deploy_pipeline,
    deploy_stack,
)
from tests.infra.cfn_deploy import register_backlog_scaling as register_scaling
from tests.infra.cfn_outputs import (
    DEAD_LETTER_OUTPUT_OF,
    JOINED,
    PIPELINE_OUTPUTS,
    PIPELINE_RESOURCES,
    STACK_OUTPUTS,
)
from tests.infra.cfn_yaml import load_template
from worker.app.resources import (
    CONVERSE_VISIBILITY_TIMEOUT,
    DEAD_LETTER_RETENTION_SECONDS,
    MAX_RECEIVE_COUNT,
    SOURCE_RETENTION_SECONDS,
    Resources,
    dead_letter_name,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def outputs(moto_endpoint: str) -> dict[str, str]:
    """Both stacks' outputs: the pipeline stack ``mira-pipeline``, then the stack ``mira``."""
    return deploy_stack(moto_endpoint)


def queue_attributes(endpoint: str, queue_url: str) -> dict[str, str]:
    sqs = aws_client("sqs", endpoint)
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])
    return dict(attributes["Attributes"])


def stack_resources(endpoint: str, stack_name: str) -> dict[str, str]:
    """A stack's resources: logical id -> type (moto lists the types it skips with no id)."""
    cloudformation = aws_client("cloudformation", endpoint)
    summaries = cloudformation.list_stack_resources(StackName=stack_name)
    return {
        r["LogicalResourceId"]: r["ResourceType"]
        for r in summaries["StackResourceSummaries"]
        if r["LogicalResourceId"]
    }


def table_name(arn: str) -> str:
    return arn.split(":table/", 1)[1]


def test_the_stacks_report_every_output(outputs: dict[str, str]) -> None:
    assert set(outputs) >= STACK_OUTPUTS | PIPELINE_OUTPUTS
    assert all(outputs.values())


def test_the_converse_stack_creates_only_what_it_owns(moto_endpoint: str) -> None:
    """Its queues are the converse queue and its DLQ, its table the ledger: the history
    table and the model and compaction queues stay the pipeline stack's."""
    resources = stack_resources(moto_endpoint, "mira")
    by_type: dict[str, set[str]] = {}
    for logical_id, resource_type in resources.items():
        by_type.setdefault(resource_type, set()).add(logical_id)
    assert by_type["AWS::SQS::Queue"] == {"ConverseQueue", "ConverseDeadLetterQueue"}
    assert by_type["AWS::DynamoDB::Table"] == {"LedgerTable"}
    assert set(stack_resources(moto_endpoint, "mira-pipeline")) == PIPELINE_RESOURCES


def test_the_pipeline_outputs_are_what_the_converse_stack_takes(
    outputs: dict[str, str],
) -> None:
    """Each joined ARN the pipeline stack reports, the converse template's parameter of the
    same name accepts (its AllowedPattern)."""
    parameters = load_template()["Parameters"]
    for name in JOINED:
        assert re.fullmatch(parameters[name]["AllowedPattern"], outputs[name]), name


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


def test_stacks_named_after_the_prefix_name_things_as_bootstrap_does(
    outputs: dict[str, str],
) -> None:
    resources = Resources()
    env_to_output = {
        "CONVERSE_QUEUE_URL": "ConverseQueueUrl",
        "MODEL_QUEUE_URL": "ModelQueueUrl",
        "COMPACTION_QUEUE_URL": "CompactionQueueUrl",
    }
    for spec in resources.queues:
        queue_output = env_to_output[spec.env]
        assert outputs[queue_output].rsplit("/", 1)[-1] == spec.name
        dead_letter_url = outputs[DEAD_LETTER_OUTPUT_OF[queue_output]]
        assert dead_letter_url.rsplit("/", 1)[-1] == dead_letter_name(spec.name)
    assert table_name(outputs["HistoryTableArn"]) == resources.table
    assert outputs["LedgerTableName"] == resources.ledger_table


def test_the_deployed_history_and_ledger_tables_are_keyed_pk_and_sk(
    moto_endpoint: str, outputs: dict[str, str]
) -> None:
    """(moto's CloudFormation leaves out a table's TimeToLiveSpecification: the ledger's TTL
    is pinned on the template, tests/infra/test_cloudformation_template.py.)"""
    dynamodb = aws_client("dynamodb", moto_endpoint)
    for name in (table_name(outputs["HistoryTableArn"]), outputs["LedgerTableName"]):
        table = dynamodb.describe_table(TableName=name)["Table"]
        assert table["KeySchema"] == [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ]
        assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


def test_the_deployed_bucket_exists(moto_endpoint: str, outputs: dict[str, str]) -> None:
    s3 = aws_client("s3", moto_endpoint)
    s3.head_bucket(Bucket=outputs["PayloadBucketName"])  # raises if absent


def test_a_fifo_model_queue_is_fifo_with_a_fifo_dead_letter_queue(moto_endpoint: str) -> None:
    """SQS requires a FIFO queue's dead-letter queue to be FIFO too; both are named as
    `worker bootstrap --fifo-model-queue` names them."""
    joined = deploy_pipeline(moto_endpoint, prefix="ordered", parameters={"ModelQueueType": "fifo"})
    resources = Resources(prefix="ordered", fifo_model_queue=True)
    (model,) = [spec for spec in resources.queues if spec.env == "MODEL_QUEUE_URL"]
    queue = queue_attributes(moto_endpoint, joined["ModelQueueUrl"])
    dead_letter_queue = queue_attributes(moto_endpoint, joined["ModelDeadLetterQueueUrl"])
    assert joined["ModelQueueUrl"].rsplit("/", 1)[-1] == model.name == "ordered-model.fifo"
    assert joined["ModelDeadLetterQueueUrl"].endswith(f"/{dead_letter_name(model.name)}")
    assert queue["FifoQueue"] == dead_letter_queue["FifoQueue"] == "true"
    assert (
        json.loads(queue["RedrivePolicy"])["deadLetterTargetArn"] == (dead_letter_queue["QueueArn"])
    )
    assert joined["ModelQueueArn"].endswith(":ordered-model.fifo")


def test_deleting_the_converse_stack_leaves_what_it_joined(moto_endpoint: str) -> None:
    """The model stage's input queue, the compactor's, and the history with its items,
    outlive the converse stack: they were never its."""
    joined = deploy_pipeline(moto_endpoint, prefix="brief")
    deploy_converse(moto_endpoint, joined=joined, stack_name="brief")
    dynamodb = aws_client("dynamodb", moto_endpoint)
    history = table_name(joined["HistoryTableArn"])
    dynamodb.put_item(TableName=history, Item={"pk": {"S": "matter-1"}, "sk": {"S": "state"}})
    sqs = aws_client("sqs", moto_endpoint)
    sqs.send_message(QueueUrl=joined["ModelQueueUrl"], MessageBody="{}")

    cloudformation = aws_client("cloudformation", moto_endpoint)
    cloudformation.delete_stack(StackName="brief")
    cloudformation.get_waiter("stack_delete_complete").wait(
        StackName="brief", WaiterConfig={"Delay": 1, "MaxAttempts": 30}
    )
    queues = sqs.list_queues(QueueNamePrefix="brief-")["QueueUrls"]
    assert sorted(url.rsplit("/", 1)[-1] for url in queues) == [
        "brief-compaction",
        "brief-compaction-dlq",
        "brief-model",
        "brief-model-dlq",
    ]
    attributes = queue_attributes(moto_endpoint, joined["ModelQueueUrl"])
    assert attributes["ApproximateNumberOfMessages"] == "1"
    assert dynamodb.scan(TableName=history)["Count"] == 1
    assert "brief-ledger" not in dynamodb.list_tables()["TableNames"]


def test_a_stack_given_a_bucket_joins_it_and_creates_none(moto_endpoint: str) -> None:
    s3 = aws_client("s3", moto_endpoint)
    s3.create_bucket(Bucket="platform-payloads")
    joined = deploy_pipeline(moto_endpoint, prefix="shared")
    given = deploy_converse(
        moto_endpoint,
        joined=joined,
        stack_name="shared",
        parameters={"PayloadBucketName": "platform-payloads"},
    )
    assert given["PayloadBucketName"] == "platform-payloads"
    types = set(stack_resources(moto_endpoint, "shared").values())
    assert "AWS::S3::Bucket" not in types
    ecs = aws_client("ecs", moto_endpoint)
    task = ecs.describe_task_definition(taskDefinition="shared-converse-worker")["taskDefinition"]
    (container,) = task["containerDefinitions"]
    environment = {e["name"]: e["value"] for e in container["environment"] if e is not None}
    assert environment["PAYLOAD_BUCKET"] == "platform-payloads"


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
    widget shows exactly the alarms the converse stack created (not the pipeline stack's,
    which belong to the model stage and the compactor), and the panels the stack's queue and
    the joined queues by their names."""
    cloudwatch = aws_client("cloudwatch", moto_endpoint)
    body = json.loads(
        cloudwatch.get_dashboard(DashboardName="mira-converse-stage")["DashboardBody"]
    )
    cloudformation = aws_client("cloudformation", moto_endpoint)
    alarm_names = {
        r["PhysicalResourceId"]
        for r in cloudformation.list_stack_resources(StackName="mira")["StackResourceSummaries"]
        if r["ResourceType"] == "AWS::CloudWatch::Alarm"
    }
    created = {
        alarm["AlarmArn"]
        for alarm in cloudwatch.describe_alarms(AlarmNames=sorted(alarm_names))["MetricAlarms"]
    }
    (status,) = [widget for widget in body["widgets"] if widget["type"] == "alarm"]
    assert len(created) == 8
    assert set(status["properties"]["alarms"]) == created
    converse_queue = outputs["ConverseQueueUrl"].rsplit("/", 1)[-1]
    first = next(widget for widget in body["widgets"] if widget["type"] == "metric")
    assert first["properties"]["metrics"][0][:4] == [
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        "QueueName",
        converse_queue,
    ]
    (downstream,) = [
        w["properties"]
        for w in body["widgets"]
        if w.get("properties", {}).get("title") == "Model and compaction queues"
    ]
    drawn = {metric[3] for metric in downstream["metrics"] if metric[3] != "."}
    assert drawn == {"mira-model", "mira-compaction"}


#: The model's settings, each given: parameter -> (the variable it sets, the value).
MODEL_SETTINGS = {
    "ModelId": ("MODEL_ID", "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"),
    "PromptCacheMinTokens": ("PROMPT_CACHE_MIN_TOKENS", "2048"),
    "ModelPrefixTokens": ("MODEL_PREFIX_TOKENS", "1500"),
}


def test_a_stack_given_the_models_settings_passes_them_to_its_task(
    moto_endpoint: str, outputs: dict[str, str]
) -> None:
    """moto's CloudFormation takes the parameters and puts each in the task definition's
    environment. (Left unset, each variable is absent: tests/infra/test_cloudformation_template.py
    checks that on the rendering, because moto compares a Number parameter with "0" as a number,
    where CloudFormation compares the strings.)"""
    given = {parameter: value for parameter, (_, value) in MODEL_SETTINGS.items()}
    deploy_converse(moto_endpoint, joined=outputs, stack_name="given", parameters=given)
    ecs = aws_client("ecs", moto_endpoint)
    task = ecs.describe_task_definition(taskDefinition="given-converse-worker")["taskDefinition"]
    (container,) = task["containerDefinitions"]
    environment = {e["name"]: e["value"] for e in container["environment"] if e is not None}
    expected = dict(MODEL_SETTINGS.values())
    assert {variable: environment.get(variable) for variable in expected} == expected
