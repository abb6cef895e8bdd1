"""Cheap calls of the consumer's own to a dependency it judged failing (its recovery probe)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from worker.adapters.client_errors import aws_call

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_dynamodb.type_defs import QueryInputTypeDef

#: A partition no conversation uses (ids are producers' UUIDs; ``probe#`` is ours).
PROBE_PARTITION = "probe#converse-stage"


def probe_query(table: str) -> QueryInputTypeDef:
    """One eventually consistent Query of a partition that is never written, one item at
    most: half a read unit, and the one read the stage's role has on the history table."""
    return {
        "TableName": table,
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": PROBE_PARTITION}},
        "ProjectionExpression": "pk",
        "Limit": 1,
    }


class TableProbe:
    """A Query on the data plane a throttled table refuses (DescribeTable would not show
    it), of :func:`probe_query`."""

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._client = client
        self._table = table

    async def __call__(self) -> None:
        with aws_call("dynamodb.Query"):
            await self._client.query(**probe_query(self._table))
