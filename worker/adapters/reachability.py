"""The start-up checks' calls: each proves that one resource is there and that the role may
make the calls the stage makes on it, and none writes anything.

=============== ============================================== ===========================
resource        calls (each request built by a function here)  IAM action
=============== ============================================== ===========================
a send queue    GetQueueAttributes (``QueueArn``)              ``sqs:GetQueueAttributes``
history table   Query of a conversation no one has;            ``dynamodb:Query``,
                UpdateItem of that conversation's ``state``    ``dynamodb:UpdateItem``
                on a condition that never holds
ledger table    GetItem of a command no one sent; UpdateItem   ``dynamodb:GetItem``,
                of it on a condition that never holds          ``dynamodb:UpdateItem``
bucket          HeadBucket                                     ``s3:ListBucket``
=============== ============================================== ===========================

IAM is evaluated before the condition, so the never-applied UpdateItem is answered
``AccessDeniedException`` when the role may not make it and ``ConditionalCheckFailed
Exception`` (the check's success) when it may: nothing is written either way, and a failed
condition leaves no stream record. It names only attributes the stage writes (on the history
table, the contract's own attributes of ``state``), so an attribute-limited grant allows it.
The converse queue is read with :meth:`worker.adapters.sqs.SqsQueue.redrive`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from worker.adapters.client_errors import aws_call, error_code
from worker.adapters.dynamodb import state_key
from worker.adapters.ledger_records import command_get_request, command_key
from worker.adapters.probes import PROBE_PARTITION, probe_query
from worker.errors import StoreUnavailable

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_dynamodb.type_defs import (
        AttributeValueTypeDef,
        GetItemInputTypeDef,
        UpdateItemInputTypeDef,
    )
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_s3.type_defs import HeadBucketRequestTypeDef
    from types_aiobotocore_sqs import SQSClient
    from types_aiobotocore_sqs.type_defs import GetQueueAttributesRequestTypeDef

#: A conversation no one has (the recovery probe's partition) and a command no one sent.
PROBE_CONVERSATION = PROBE_PARTITION
PROBE_COMMAND = "probe"
#: A condition no item meets.
NEVER = "attribute_exists(pk) AND attribute_not_exists(pk)"
#: The attribute each table's never-applied UpdateItem sets: one the stage itself writes.
HISTORY_PROBE_ATTRIBUTE = "compaction_request_version"
LEDGER_PROBE_ATTRIBUTE = "lease_until"

#: The IAM action of each operation whose action is not named as the operation is.
_ACTIONS = {"s3.HeadBucket": "s3:ListBucket"}
#: What a refusal's code says, in a few words.
_MISSING_QUEUE = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
_MISSING_BUCKET = frozenset({"NoSuchBucket", "404"})
_DENIED = frozenset({"403", "Forbidden"})  # and every code starting "AccessDenied"
_CREDENTIALS = frozenset(
    {
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
        "InvalidAccessKeyId",
    }
)


def queue_arn_request(queue_url: str) -> GetQueueAttributesRequestTypeDef:
    return {"QueueUrl": queue_url, "AttributeNames": ["QueueArn"]}


def never_applied_update(
    table: str, key: dict[str, AttributeValueTypeDef], attribute: str
) -> UpdateItemInputTypeDef:
    """An UpdateItem that sets ``attribute`` of ``key`` on a condition no item meets."""
    return {
        "TableName": table,
        "Key": key,
        "UpdateExpression": f"SET {attribute} = :never",
        "ConditionExpression": NEVER,
        "ExpressionAttributeValues": {":never": {"N": "0"}},
    }


def history_probe_update(table: str) -> UpdateItemInputTypeDef:
    return never_applied_update(table, state_key(PROBE_CONVERSATION), HISTORY_PROBE_ATTRIBUTE)


def ledger_probe_get(table: str) -> GetItemInputTypeDef:
    """The ledger's read of a record, of a command no one sent."""
    return command_get_request(table, PROBE_CONVERSATION, PROBE_COMMAND)


def ledger_probe_update(table: str) -> UpdateItemInputTypeDef:
    key = command_key(PROBE_CONVERSATION, PROBE_COMMAND)
    return never_applied_update(table, key, LEDGER_PROBE_ATTRIBUTE)


def head_bucket_request(bucket: str) -> HeadBucketRequestTypeDef:
    return {"Bucket": bucket}


async def check_queue(client: SQSClient, queue_url: str) -> None:
    with aws_call("sqs.GetQueueAttributes"):
        await client.get_queue_attributes(**queue_arn_request(queue_url))


async def check_history_table(client: DynamoDBClient, table: str) -> None:
    with aws_call("dynamodb.Query"):
        await client.query(**probe_query(table))
    await _never_applied(client, history_probe_update(table))


async def check_ledger_table(client: DynamoDBClient, table: str) -> None:
    with aws_call("dynamodb.GetItem"):
        await client.get_item(**ledger_probe_get(table))
    await _never_applied(client, ledger_probe_update(table))


async def check_bucket(client: S3Client, bucket: str) -> None:
    with aws_call("s3.HeadBucket"):
        await client.head_bucket(**head_bucket_request(bucket))


async def _never_applied(client: DynamoDBClient, request: UpdateItemInputTypeDef) -> None:
    with aws_call("dynamodb.UpdateItem"):
        try:
            await client.update_item(**request)
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise


def iam_action(operation: str) -> str:
    """The IAM action that allows ``operation`` (``sqs.GetQueueUrl`` → ``sqs:GetQueueUrl``)."""
    return _ACTIONS.get(operation, operation.replace(".", ":", 1))


def refusal(error: StoreUnavailable) -> str:
    """What a refused call says of its resource, in a few words and the service's code (never
    the service's own message, which can quote request values)."""
    code = error.code or "no code"
    operation = error.operation or "the call"
    shown = f"HTTP {code}" if code.isdigit() else code
    if code in _MISSING_QUEUE:
        said = "the queue does not exist"
    elif code == "ResourceNotFoundException":
        said = "the table does not exist"
    elif code in _MISSING_BUCKET and operation.startswith("s3."):
        said = "the bucket does not exist"
    elif code in _DENIED or code.startswith("AccessDenied"):
        said = f"the role may not call {iam_action(operation)} on it"
    elif code in _CREDENTIALS:
        said = "the credentials were refused"
    else:
        said = f"{operation} was refused"
    return f"{said} ({shown})"
