"""Under a customer managed key the worker needs no change: the templates (the pipeline stack
and the converse stack joined to it), deployed to a moto server with KmsKeyArn set to a key
made in moto's KMS, put the queues on SSE-KMS and the bucket on the key; with a history table
on the same key, the real worker, given the stacks' outputs only, serves turns through them with
its own unchanged calls (none of them carries an encryption parameter: the services encrypt).

What moto does not do, and so what this test cannot show: moto's SQS and DynamoDB store the key
settings but neither encrypt nor call KMS, and no moto service checks IAM or a key policy. So
the test proves the stage works with the settings as deployed and the objects it writes carry
the key; the KMS permissions are proved by evaluating the role's policy
(tests/infra/test_task_role_as_aws_evaluates_it.py). Two settings moto cannot show either, so
the template's own tests pin them: its CloudFormation drops the bucket's BucketKeyEnabled (its
S3 resource passes on only the algorithm and the key), and its SQS reports
SqsManagedSseEnabled "true" on every queue, a KMS key or not (its default; in SQS a queue has
one kind of SSE, and the template leaves SqsManagedSseEnabled out when it sets the key).
The table is made through the DynamoDB API, not taken from the stack: moto's CloudFormation
hands the table's SSESpecification on in CloudFormation's shape (SSEEnabled), which its
DynamoDB does not read (it reads the API's Enabled), so the deployed table reports no key.
"""

from __future__ import annotations

import json

import pytest

from localaws.endpoints import CREDENTIALS
from tests.infra.cfn_deploy import aws_client, deploy_stack
from tests.infra.cfn_outputs import QUEUE_OUTPUTS
from tests.integration.conftest import Stack, body_of, exchanges, running_worker
from worker.adapters.s3 import S3ObjectStore
from worker.app.resources import history_table_definition
from worker.app.runtime import aws_clients
from worker.delivery.pointers import SIZE_ATTRIBUTE, parse_pointer, pointer_body

pytestmark = pytest.mark.integration

KEYED_TABLE = "keyed-history-under-the-key"


@pytest.fixture
def key_and_outputs(fresh_moto: str) -> tuple[str, dict[str, str]]:
    """A key, the stack deployed with it, and the history table on it."""
    kms = aws_client("kms", fresh_moto)
    key = kms.create_key(Description="mira converse stage")["KeyMetadata"]["Arn"]
    keyed = {"KmsKeyArn": key}
    outputs = deploy_stack(
        fresh_moto, stack_name="keyed", parameters=keyed, pipeline_parameters=keyed
    )
    dynamodb = aws_client("dynamodb", fresh_moto)
    dynamodb.create_table(
        **history_table_definition(KEYED_TABLE),
        SSESpecification={"Enabled": True, "SSEType": "KMS", "KMSMasterKeyId": key},
    )
    return key, outputs


def test_the_deployed_queues_table_and_bucket_are_under_the_key(
    fresh_moto: str, key_and_outputs: tuple[str, dict[str, str]]
) -> None:
    key, outputs = key_and_outputs
    sqs = aws_client("sqs", fresh_moto)
    for output in QUEUE_OUTPUTS:
        attributes = sqs.get_queue_attributes(QueueUrl=outputs[output], AttributeNames=["All"])
        assert attributes["Attributes"]["KmsMasterKeyId"] == key, output
        assert attributes["Attributes"]["KmsDataKeyReusePeriodSeconds"] == "300", output
    encryption = aws_client("s3", fresh_moto).get_bucket_encryption(
        Bucket=outputs["PayloadBucketName"]
    )["ServerSideEncryptionConfiguration"]
    (rule,) = encryption["Rules"]
    assert rule["ApplyServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "aws:kms",
        "KMSMasterKeyID": key,
    }
    assert outputs["KmsKeyArn"] == key
    assert outputs["TaskRoleArn"].startswith("arn:aws:iam::")


async def test_the_worker_serves_turns_through_the_keyed_stack_unchanged(
    fresh_moto: str,
    key_and_outputs: tuple[str, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A turn reads the history from the keyed table and keeps the ledger in the stack's
    ledger table, receives from and
    sends to the keyed queues (its dead-letter queue included), reads a producer's payload
    from the keyed bucket and offloads its own large prompt there."""
    key, outputs = key_and_outputs
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", fresh_moto)
    env = {
        "CONVERSE_QUEUE_URL": outputs["ConverseQueueUrl"],
        "MODEL_QUEUE_URL": outputs["ModelQueueUrl"],
        "COMPACTION_QUEUE_URL": outputs["CompactionQueueUrl"],
        "HISTORY_TABLE": KEYED_TABLE,
        "LEDGER_TABLE": outputs["LedgerTableName"],
        "PAYLOAD_BUCKET": outputs["PayloadBucketName"],
    }
    bucket = env["PAYLOAD_BUCKET"]
    pasted = "Schedule 4, pricing. " * 40_000  # past the inline limit: the prompt goes to S3
    inbound = json.dumps(
        {
            "type": "converse",
            "command_id": "c-kms-large",
            "conversation_id": "matter-kms",
            "message": pasted,
        }
    )
    async with aws_clients() as clients:
        table = (await clients.dynamodb.describe_table(TableName=KEYED_TABLE))["Table"]
        assert table["SSEDescription"]["SSEType"] == "KMS"
        assert table["SSEDescription"]["KMSMasterKeyArn"] == key
        stack = Stack(endpoint=fresh_moto, env=env, clients=clients)
        await stack.seed("matter-kms", exchanges(20), folded_through=0)
        await stack.send_command(command_id="c-kms", conversation_id="matter-kms")
        # A producer's offloaded command, as the Extended Client leaves it.
        await clients.s3.put_object(Bucket=bucket, Key="c-kms-large", Body=inbound.encode())
        await clients.sqs.send_message(
            QueueUrl=env["CONVERSE_QUEUE_URL"],
            MessageBody=pointer_body(bucket, "c-kms-large"),
            MessageAttributes={
                SIZE_ATTRIBUTE: {"DataType": "Number", "StringValue": str(len(inbound))}
            },
        )
        await stack.send_raw("{not a command")
        async with running_worker(stack.settings()):
            prompts = await stack.drain("MODEL_QUEUE_URL", expect=2)
            [fold] = await stack.drain("COMPACTION_QUEUE_URL", expect=1)
            [dead] = await stack.drain(outputs["ConverseDeadLetterQueueUrl"], expect=1)
        by_command = {message["ResolvedPayload"]["command_id"]: message for message in prompts}
        assert set(by_command) == {"c-kms", "c-kms-large"}
        assert by_command["c-kms-large"]["ResolvedPayload"]["message"] == pasted
        assert json.loads(fold["Body"])["through"] == 40
        assert dead["Body"] == "{not a command"
        for command_id in ("c-kms", "c-kms-large"):  # the ledger's records, in the keyed table
            record = await clients.dynamodb.get_item(
                TableName=env["LEDGER_TABLE"],
                Key={"pk": {"S": "matter-kms"}, "sk": {"S": f"cmd#{command_id}"}},
                ConsistentRead=True,
            )
            assert "Item" in record, command_id
        large = by_command["c-kms-large"]
        attributes = {n: v.get("StringValue", "") for n, v in large["MessageAttributes"].items()}
        assert parse_pointer(large["Body"], attributes) is not None  # offloaded to the bucket
        inbound_object = await clients.s3.head_object(Bucket=bucket, Key="c-kms-large")
    # A producer's object, written with no encryption parameter, takes the bucket's key.
    assert inbound_object["ServerSideEncryption"] == "aws:kms"
    assert inbound_object["SSEKMSKeyId"] == key
    assert body_of(by_command["c-kms"])["command_id"] == "c-kms"


async def test_the_stages_own_offloaded_objects_are_stored_under_the_key(
    fresh_moto: str,
    key_and_outputs: tuple[str, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the stage writes to the keyed bucket (the adapter every offload goes through)
    is encrypted with the stack's key, as S3 applies the bucket's default encryption."""
    key, outputs = key_and_outputs
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", fresh_moto)
    bucket = outputs["PayloadBucketName"]
    async with aws_clients() as clients:
        await S3ObjectStore(clients.s3).put(bucket, "payloads/prompt.json", b"{}")
        stored = await clients.s3.head_object(Bucket=bucket, Key="payloads/prompt.json")
    assert stored["ServerSideEncryption"] == "aws:kms"
    assert stored["SSEKMSKeyId"] == key
