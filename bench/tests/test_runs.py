"""The seeding every contender-running part starts from (:func:`bench.parts.runs.seeded`),
against a moto server."""

from __future__ import annotations

from typing import Any

import pytest

from bench.parts.runs import TABLE, seeded
from localaws.endpoints import aws_environ
from localaws.moto import threaded_moto
from worker.app.runtime import aws_clients


async def items_in(dynamodb: Any, table: str) -> int:
    """Every item of ``table`` (0 if it is not there), counted page by page: one Scan stops
    at 1 MB."""
    if table not in (await dynamodb.list_tables())["TableNames"]:
        return 0
    pages = dynamodb.get_paginator("scan").paginate(TableName=table, Select="COUNT")
    return sum([page["Count"] async for page in pages])


@pytest.mark.integration
async def test_seeding_makes_the_history_table_if_missing_and_writes_every_item(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # moto's backends are the process's: other tests' tables may be there, this one too.
    with threaded_moto(monkeypatch.setattr) as endpoint:
        for name, value in aws_environ(endpoint).items():
            monkeypatch.setenv(name, value)
        async with aws_clients(pool_size=4) as clients:
            before = await items_in(clients.dynamodb, TABLE)
            first = await seeded(clients, 2, prefix="one")
            second = await seeded(clients, 1, prefix="two")  # the table is there now
            after = await items_in(clients.dynamodb, TABLE)
    assert sorted(first.conversations) == ["one-0000", "one-0001"]
    assert [c.conversation_id for c in second.pool] == ["two-0000"]
    # Each conversation's messages and its state item.
    assert first.items == sum(c.length + 1 for c in first.pool)
    assert second.items == sum(c.length + 1 for c in second.pool)
    assert after - before == first.items + second.items
