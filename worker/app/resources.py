"""The contract's resources, defined once: ``worker bootstrap``, the demo, the tests and the
LocalStack compose file all create them from here.

Some are the stage's own (the converse queue and its dead-letter queue, the ledger table,
the payload bucket); the others belong to the stages beside it (the history table, the model
and compaction queues) and are created here only for a stack of one's own: a demo, the tests,
a test account. Creation is idempotent: what exists is left as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_dynamodb.type_defs import CreateTableInputTypeDef
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_s3.literals import BucketLocationConstraintType
    from types_aiobotocore_s3.type_defs import CreateBucketRequestTypeDef
    from types_aiobotocore_sqs import SQSClient
    from types_aiobotocore_sqs.literals import QueueAttributeNameType

#: Receives before SQS moves a message to its dead-letter queue (the redrive backstop).
MAX_RECEIVE_COUNT = 5
#: Seconds a received converse command stays invisible; the worker's grace period is shorter.
CONVERSE_VISIBILITY_TIMEOUT = 60
#: Seconds the converse, model and compaction queues keep a message: four days.
SOURCE_RETENTION_SECONDS = 345_600
#: Fourteen days, SQS's longest retention, on every dead-letter queue. SQS moves a dead letter
#: with its first enqueue time and deletes it that long after it, so a dead-letter queue must
#: keep a message longer than its source queue did.
DEAD_LETTER_RETENTION_SECONDS = 1_209_600
#: Attribute DynamoDB's TTL reads on the ledger's command records (epoch seconds).
TTL_ATTRIBUTE = "expires_at"


@dataclass(frozen=True, slots=True)
class QueueSpec:
    env: str
    name: str
    visibility_timeout: int = 30


@dataclass(frozen=True, slots=True)
class Resources:
    """Names of everything the stage needs, under one prefix."""

    prefix: str = "mira"
    fifo_model_queue: bool = False
    converse_visibility_timeout: int = CONVERSE_VISIBILITY_TIMEOUT

    @property
    def queues(self) -> tuple[QueueSpec, ...]:
        model = f"{self.prefix}-model" + (".fifo" if self.fifo_model_queue else "")
        return (
            QueueSpec(
                "CONVERSE_QUEUE_URL", f"{self.prefix}-converse", self.converse_visibility_timeout
            ),
            QueueSpec("MODEL_QUEUE_URL", model),
            QueueSpec("COMPACTION_QUEUE_URL", f"{self.prefix}-compaction"),
        )

    @property
    def table(self) -> str:
        return f"{self.prefix}-history"

    @property
    def ledger_table(self) -> str:
        return f"{self.prefix}-ledger"

    @property
    def bucket(self) -> str:
        return f"{self.prefix}-payloads"


def history_table_definition(name: str) -> CreateTableInputTypeDef:
    """CreateTable arguments of the contract's history table: ``pk``/``sk``, on demand. The
    ledger table has the same key schema (:func:`ledger_table_definition`)."""
    return {
        "TableName": name,
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        "BillingMode": "PAY_PER_REQUEST",
    }


def ledger_table_definition(name: str) -> CreateTableInputTypeDef:
    """CreateTable arguments of the stage's ledger table: ``pk``/``sk``, on demand (its TTL
    on :data:`TTL_ATTRIBUTE` is set once the table exists)."""
    return history_table_definition(name)


async def create_table(
    dynamodb: DynamoDBClient, definition: CreateTableInputTypeDef, *, ttl: bool
) -> None:
    """Create the table if absent, waiting until it exists; with ``ttl``, expiring items at
    :data:`TTL_ATTRIBUTE`."""
    name = definition["TableName"]
    if name in (await dynamodb.list_tables())["TableNames"]:
        return
    await dynamodb.create_table(**definition)
    # Every second, not the waiter's 20: a local endpoint makes a table in under one.
    await dynamodb.get_waiter("table_exists").wait(
        TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
    )
    if ttl:
        await dynamodb.update_time_to_live(
            TableName=name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
        )


def dead_letter_name(queue_name: str) -> str:
    if queue_name.endswith(".fifo"):
        return queue_name.removesuffix(".fifo") + "-dlq.fifo"
    return queue_name + "-dlq"


def queue_attributes(
    spec: QueueSpec, *, fifo: bool, retention_seconds: int
) -> dict[QueueAttributeNameType, str]:
    attributes: dict[QueueAttributeNameType, str] = {
        "VisibilityTimeout": str(spec.visibility_timeout),
        "MessageRetentionPeriod": str(retention_seconds),
        "SqsManagedSseEnabled": "true",
    }
    if fifo:
        attributes["FifoQueue"] = "true"
    return attributes


async def create_resources(
    sqs: SQSClient,
    dynamodb: DynamoDBClient,
    s3: S3Client,
    resources: Resources,
    *,
    region: str,
) -> dict[str, str]:
    """Create the queues (each with a DLQ and redrive), the tables and the bucket if absent.

    Returns the environment lines that point the stage at them.
    """
    env: dict[str, str] = {}
    for spec in resources.queues:
        fifo = spec.name.endswith(".fifo")
        dlq = await sqs.create_queue(
            QueueName=dead_letter_name(spec.name),
            Attributes=queue_attributes(
                QueueSpec(spec.env, spec.name),
                fifo=fifo,
                retention_seconds=DEAD_LETTER_RETENTION_SECONDS,
            ),
        )
        dlq_arn = (
            await sqs.get_queue_attributes(QueueUrl=dlq["QueueUrl"], AttributeNames=["QueueArn"])
        )["Attributes"]["QueueArn"]
        attributes = queue_attributes(spec, fifo=fifo, retention_seconds=SOURCE_RETENTION_SECONDS)
        attributes["RedrivePolicy"] = json.dumps(
            {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVE_COUNT)}
        )
        queue = await sqs.create_queue(QueueName=spec.name, Attributes=attributes)
        env[spec.env] = queue["QueueUrl"]

    await create_table(dynamodb, history_table_definition(resources.table), ttl=False)
    env["HISTORY_TABLE"] = resources.table
    await create_table(dynamodb, ledger_table_definition(resources.ledger_table), ttl=True)
    env["LEDGER_TABLE"] = resources.ledger_table

    existing_buckets = {b["Name"] for b in (await s3.list_buckets()).get("Buckets", [])}
    if resources.bucket not in existing_buckets:
        create: CreateBucketRequestTypeDef = {"Bucket": resources.bucket}
        if region != "us-east-1":
            # The stubs list the regions of their release as a Literal; S3 takes any region
            # name, and a newer region is a str the stubs cannot know.
            location = cast("BucketLocationConstraintType", region)
            create["CreateBucketConfiguration"] = {"LocationConstraint": location}
        await s3.create_bucket(**create)
        # The bucket's default encryption, as the stack sets it without a customer managed
        # key: objects are encrypted by the bucket's rule, never by the writer's request.
        await s3.put_bucket_encryption(
            Bucket=resources.bucket,
            ServerSideEncryptionConfiguration={
                "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
            },
        )
    env["PAYLOAD_BUCKET"] = resources.bucket
    return env
