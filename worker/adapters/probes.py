"""Cheap calls of the consumer's own to a dependency it judged failing (its recovery probe)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from worker.adapters.client_errors import aws_call

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient

#: A key no command or conversation uses (ids are producers' UUIDs; ``probe#`` is ours).
PROBE_KEY = {"pk": {"S": "probe#converse-stage"}, "sk": {"S": "probe"}}


class TableProbe:
    """One eventually consistent GetItem of a key that is never written: half a read unit,
    on the data plane a throttled table refuses (DescribeTable would not show it)."""

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._client = client
        self._table = table

    async def __call__(self) -> None:
        with aws_call("dynamodb.GetItem"):
            await self._client.get_item(
                TableName=self._table, Key=PROBE_KEY, ProjectionExpression="pk"
            )
