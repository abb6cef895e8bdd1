"""The calls ``worker erase`` makes, run with an operator's credentials: a conversation's
command records (ledger table), the stage's attributes of its ``state`` item (history table)
and the payload objects filed under its prefix (payload bucket).

Not part of the worker's turn: the task role grants none of these deletes
(``tests/infra/test_task_role_matches_the_code.py`` reads only the turn's adapters); the
operator's policy for them is in docs/RETENTION.md, and
``tests/infra/test_erase_policy.py`` evaluates each request built here against it.

Every request is built by a pure module-level function (``ledger_keys_query``,
``ledger_record_delete``, ``state_erase_request``, ``state_read_request``,
``objects_list_request``, ``objects_delete_request``), so the policy test and the retention
table's test read the very requests the command sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from worker.adapters.client_errors import aws_call
from worker.adapters.dynamodb import STAGE_STATE_ATTRIBUTES, state_key

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_dynamodb.type_defs import (
        AttributeValueTypeDef,
        DeleteItemInputTypeDef,
        GetItemInputTypeDef,
        QueryInputTypeDef,
        UpdateItemInputTypeDef,
    )
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_s3.type_defs import (
        DeleteObjectsRequestTypeDef,
        ListObjectsV2RequestTypeDef,
    )

#: DeleteObjects takes at most this many keys a call.
MAX_DELETE_OBJECTS = 1000


def ledger_keys_query(
    table: str, conversation_id: str, *, start: dict[str, AttributeValueTypeDef] | None = None
) -> QueryInputTypeDef:
    """One page of the keys (only the keys) of a conversation's command records."""
    query: QueryInputTypeDef = {
        "TableName": table,
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": conversation_id}},
        "ProjectionExpression": "pk, sk",
        "Select": "SPECIFIC_ATTRIBUTES",
        "ConsistentRead": True,
    }
    if start is not None:
        query["ExclusiveStartKey"] = start
    return query


def ledger_record_delete(table: str, conversation_id: str, sort_key: str) -> DeleteItemInputTypeDef:
    """Delete one command record; nothing comes back."""
    return {
        "TableName": table,
        "Key": {"pk": {"S": conversation_id}, "sk": {"S": sort_key}},
        "ReturnValues": "NONE",
    }


def _state_names() -> dict[str, str]:
    return {f"#a{i}": name for i, name in enumerate(STAGE_STATE_ATTRIBUTES)}


def state_erase_request(table: str, conversation_id: str) -> UpdateItemInputTypeDef:
    """REMOVE exactly the stage's attributes from ``state``, if the item exists (never
    creating one); what comes back is what was removed (``UPDATED_OLD``), never the writer's
    attributes."""
    names = _state_names()
    return {
        "TableName": table,
        "Key": state_key(conversation_id),
        "UpdateExpression": "REMOVE " + ", ".join(names),
        "ConditionExpression": "attribute_exists(pk)",
        "ExpressionAttributeNames": names,
        "ReturnValues": "UPDATED_OLD",
    }


def state_read_request(table: str, conversation_id: str) -> GetItemInputTypeDef:
    """Read the stage's attributes of ``state``, and nothing else of it (a dry run)."""
    names = _state_names()
    return {
        "TableName": table,
        "Key": state_key(conversation_id),
        "ProjectionExpression": ", ".join(names),
        "ExpressionAttributeNames": names,
        "ConsistentRead": True,
    }


def objects_list_request(
    bucket: str, prefix: str, *, token: str | None = None
) -> ListObjectsV2RequestTypeDef:
    request: ListObjectsV2RequestTypeDef = {"Bucket": bucket, "Prefix": prefix}
    if token is not None:
        request["ContinuationToken"] = token
    return request


def objects_delete_request(bucket: str, keys: Sequence[str]) -> DeleteObjectsRequestTypeDef:
    """One DeleteObjects of up to 1,000 keys, answering only the keys it failed."""
    if len(keys) > MAX_DELETE_OBJECTS:
        raise ValueError(f"{len(keys)} keys: DeleteObjects takes {MAX_DELETE_OBJECTS}")
    return {
        "Bucket": bucket,
        "Delete": {"Objects": [{"Key": key} for key in keys], "Quiet": True},
    }


class LedgerRecords:
    """A conversation's command records in the ledger table."""

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._client = client
        self._table = table

    async def sort_keys(self, conversation_id: str) -> list[str]:
        """The ``sk`` of every record under the conversation, read consistently."""
        keys: list[str] = []
        start: dict[str, AttributeValueTypeDef] | None = None
        while True:
            request = ledger_keys_query(self._table, conversation_id, start=start)
            with aws_call("dynamodb.Query"):
                response = await self._client.query(**request)
            keys += [item["sk"]["S"] for item in response.get("Items", []) if "S" in item["sk"]]
            last = response.get("LastEvaluatedKey")
            if not last:
                return keys
            start = dict(last)

    async def delete(self, conversation_id: str, sort_key: str) -> None:
        with aws_call("dynamodb.DeleteItem"):
            await self._client.delete_item(
                **ledger_record_delete(self._table, conversation_id, sort_key)
            )


class StageState:
    """The stage's attributes of a conversation's ``state`` item in the history table."""

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._client = client
        self._table = table

    async def present(self, conversation_id: str) -> list[str]:
        """The stage's attributes the item holds (none when there is no item)."""
        with aws_call("dynamodb.GetItem"):
            response = await self._client.get_item(
                **state_read_request(self._table, conversation_id)
            )
        item = response.get("Item", {})
        return [name for name in STAGE_STATE_ATTRIBUTES if name in item]

    async def remove(self, conversation_id: str) -> list[str]:
        """Remove them; returns those the item held (none when there is no item)."""
        request = state_erase_request(self._table, conversation_id)
        with aws_call("dynamodb.UpdateItem"):
            try:
                response = await self._client.update_item(**request)
            except self._client.exceptions.ConditionalCheckFailedException:
                return []
        removed = response.get("Attributes", {})
        return [name for name in STAGE_STATE_ATTRIBUTES if name in removed]


@dataclass(frozen=True, slots=True)
class ObjectFailure:
    """One key DeleteObjects refused, with S3's code (never the object's content)."""

    key: str
    code: str


class BucketObjects:
    """Objects of one bucket: listed under a prefix, deleted by key."""

    def __init__(self, client: S3Client, bucket: str) -> None:
        self._client = client
        self.bucket = bucket

    async def keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        token: str | None = None
        while True:
            request = objects_list_request(self.bucket, prefix, token=token)
            with aws_call("s3.ListObjectsV2"):
                response = await self._client.list_objects_v2(**request)
            keys += [entry["Key"] for entry in response.get("Contents", []) if "Key" in entry]
            token = response.get("NextContinuationToken")
            if not response.get("IsTruncated") or token is None:
                return keys

    async def delete(self, keys: Sequence[str]) -> list[ObjectFailure]:
        """Delete ``keys``, 1,000 a call; returns the keys S3 refused."""
        failures: list[ObjectFailure] = []
        for start in range(0, len(keys), MAX_DELETE_OBJECTS):
            request = objects_delete_request(self.bucket, keys[start : start + MAX_DELETE_OBJECTS])
            with aws_call("s3.DeleteObjects"):
                response = await self._client.delete_objects(**request)
            failures += [
                ObjectFailure(str(error.get("Key", "?")), str(error.get("Code", "?")))
                for error in response.get("Errors", [])
            ]
        return failures
