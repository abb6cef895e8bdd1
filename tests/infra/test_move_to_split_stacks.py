"""The move from the all-in-one stack to the split stacks, rehearsed on moto's CloudFormation
as far as it plays it (docs/DEPLOY.md, "Moving to the split stacks"):

1. the running stack, made from the all-in-one template (``tests/data/
   converse-stage.all-in-one.yaml``, the template at commit ccd10f6), gets ``Retain`` on the
   model and compaction queues and their dead-letter queues (its table has it already);
2. it is updated to converse-stage.yaml, joined by ARN to that table and those queues, which
   leave the stack and stay where they are.

After it: the history's items, the messages waiting on every queue and the bucket's objects
are all there; the converse queue keeps its URL, the bucket its name; the stack holds the
ledger and none of the joined. Step 3, the pipeline stack adopting the table and queues by an
IMPORT change set, moto cannot play: it executes one as a creation (the existing table's name
fails it with ResourceInUseException), so docs/DEPLOY.md writes it out unrehearsed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra.cfn_deploy import (
    DEFAULT_IMAGE,
    apply_stack,
    aws_client,
    converse_parameters,
    create_task_network,
)
from tests.infra.cfn_outputs import JOINED, PIPELINE_RESOURCES
from tests.infra.cfn_yaml import REPO_ROOT, TEMPLATE_PATH, load_cfn_yaml

pytestmark = pytest.mark.integration

ALL_IN_ONE = REPO_ROOT / "tests" / "data" / "converse-stage.all-in-one.yaml"
#: What step 1 retains: the queues the all-in-one stack made for other stages.
QUEUES_TO_RETAIN = [
    "ModelQueue",
    "ModelDeadLetterQueue",
    "CompactionQueue",
    "CompactionDeadLetterQueue",
]
HISTORY = [
    {"pk": {"S": "matter-1187"}, "sk": {"S": "msg#000000000001"}, "content": {"S": "q"}},
    {"pk": {"S": "matter-1187"}, "sk": {"S": "state"}, "folded_through": {"N": "0"}},
    # The previous release's command record, which LEDGER_LEGACY_READS reads after the move.
    {"pk": {"S": "matter-1187"}, "sk": {"S": "cmd#c-1"}, "status": {"S": "done"}},
]


def step_one(template: dict[str, Any]) -> dict[str, Any]:
    """The all-in-one template with Retain on the queues that are other stages'."""
    resources = dict(template["Resources"])
    for logical_id in QUEUES_TO_RETAIN:
        resources[logical_id] = {
            **resources[logical_id],
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
        }
    return {**template, "Resources": resources}


@pytest.fixture(scope="module")
def moved(moto_endpoint: str) -> dict[str, Any]:
    """The all-in-one stack with its data, through steps 1 and 2; what was there before."""
    subnet_id, group_id = create_task_network(moto_endpoint)
    network = {"ContainerImage": DEFAULT_IMAGE, "Subnets": subnet_id, "SecurityGroupIds": group_id}
    before = apply_stack(
        moto_endpoint, "create", stack_name="mira", template=ALL_IN_ONE, parameters=network
    )
    dynamodb, sqs, s3 = (aws_client(s, moto_endpoint) for s in ("dynamodb", "sqs", "s3"))
    for item in HISTORY:
        dynamodb.put_item(TableName=before["HistoryTableName"], Item=item)
    for output in ("ConverseQueueUrl", "ModelQueueUrl", "CompactionQueueUrl"):
        sqs.send_message(QueueUrl=before[output], MessageBody=f"waiting on {output}")
    s3.put_object(Bucket=before["PayloadBucketName"], Key="payloads/a.json", Body=b"{}")

    retained = json.dumps(step_one(load_cfn_yaml(ALL_IN_ONE)))
    apply_stack(moto_endpoint, "update", stack_name="mira", template=retained, parameters=network)

    region, account = "us-east-1", "123456789012"
    joined = {
        "HistoryTableArn": f"arn:aws:dynamodb:{region}:{account}:table/mira-history",
        "ModelQueueArn": f"arn:aws:sqs:{region}:{account}:mira-model",
        "CompactionQueueArn": f"arn:aws:sqs:{region}:{account}:mira-compaction",
    }
    parameters = {
        **converse_parameters(moto_endpoint, joined, {"LedgerLegacyReads": "true"}),
        **network,
    }
    after = apply_stack(
        moto_endpoint, "update", stack_name="mira", template=TEMPLATE_PATH, parameters=parameters
    )
    return {"before": before, "after": after}


def test_the_converse_queue_keeps_its_url_and_the_bucket_its_name(moved: dict[str, Any]) -> None:
    before, after = moved["before"], moved["after"]
    assert after["ConverseQueueUrl"] == before["ConverseQueueUrl"]
    assert after["ConverseDeadLetterQueueUrl"] == before["ConverseDeadLetterQueueUrl"]
    assert after["PayloadBucketName"] == before["PayloadBucketName"]


def test_every_item_of_the_history_survives(moto_endpoint: str, moved: dict[str, Any]) -> None:
    dynamodb = aws_client("dynamodb", moto_endpoint)
    items = dynamodb.scan(TableName=moved["before"]["HistoryTableName"])["Items"]
    assert sorted(i["sk"]["S"] for i in items) == sorted(i["sk"]["S"] for i in HISTORY)


@pytest.mark.parametrize("output", ["ConverseQueueUrl", "ModelQueueUrl", "CompactionQueueUrl"])
def test_every_waiting_message_survives_on_its_queue(
    moto_endpoint: str, moved: dict[str, Any], output: str
) -> None:
    sqs = aws_client("sqs", moto_endpoint)
    url = moved["before"][output]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "1"


def test_the_dead_letter_queues_of_the_others_stay_too(
    moto_endpoint: str, moved: dict[str, Any]
) -> None:
    sqs = aws_client("sqs", moto_endpoint)
    names = {
        url.rsplit("/", 1)[-1] for url in sqs.list_queues(QueueNamePrefix="mira-")["QueueUrls"]
    }
    assert {"mira-model-dlq", "mira-compaction-dlq"} <= names


def test_the_bucket_keeps_its_objects(moto_endpoint: str, moved: dict[str, Any]) -> None:
    s3 = aws_client("s3", moto_endpoint)
    s3.head_object(Bucket=moved["after"]["PayloadBucketName"], Key="payloads/a.json")


def test_the_stack_now_holds_its_ledger_and_none_of_what_it_joins(
    moto_endpoint: str, moved: dict[str, Any]
) -> None:
    cloudformation = aws_client("cloudformation", moto_endpoint)
    summaries = cloudformation.list_stack_resources(StackName="mira")["StackResourceSummaries"]
    held = {r["LogicalResourceId"] for r in summaries if r["LogicalResourceId"]}
    assert "LedgerTable" in held
    assert not held & PIPELINE_RESOURCES
    dynamodb = aws_client("dynamodb", moto_endpoint)
    assert moved["after"]["LedgerTableName"] in dynamodb.list_tables()["TableNames"]
    assert set(JOINED) <= set(load_cfn_yaml(TEMPLATE_PATH)["Parameters"])


def test_without_retain_first_the_update_would_delete_the_model_stages_queue(
    moto_endpoint: str,
) -> None:
    """Guard the rehearsal: moto, taught CloudFormation's Retain (tests/infra/cfn_deploy.py),
    still deletes a resource without it that an update removes, as CloudFormation does."""
    subnet_id, group_id = create_task_network(moto_endpoint)
    network = {"ContainerImage": DEFAULT_IMAGE, "Subnets": subnet_id, "SecurityGroupIds": group_id}
    before = apply_stack(
        moto_endpoint, "create", stack_name="hasty", template=ALL_IN_ONE, parameters=network
    )
    region, account = "us-east-1", "123456789012"
    joined = {
        "HistoryTableArn": f"arn:aws:dynamodb:{region}:{account}:table/hasty-history",
        "ModelQueueArn": f"arn:aws:sqs:{region}:{account}:hasty-model",
        "CompactionQueueArn": f"arn:aws:sqs:{region}:{account}:hasty-compaction",
    }
    parameters = {**converse_parameters(moto_endpoint, joined), **network}
    apply_stack(
        moto_endpoint, "update", stack_name="hasty", template=TEMPLATE_PATH, parameters=parameters
    )
    sqs = aws_client("sqs", moto_endpoint)
    names = {
        url.rsplit("/", 1)[-1] for url in sqs.list_queues(QueueNamePrefix="hasty-")["QueueUrls"]
    }
    assert "hasty-model" not in names
    dynamodb = aws_client("dynamodb", moto_endpoint)
    assert before["HistoryTableName"] in dynamodb.list_tables()["TableNames"]  # Retain already
