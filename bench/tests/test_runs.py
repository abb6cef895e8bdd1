"""The seeding every contender-running part starts from (:func:`bench.parts.runs.seeded`),
against a moto server."""

from __future__ import annotations

import pytest

from bench.parts.runs import TABLE, seeded
from localaws.endpoints import aws_environ
from localaws.moto import threaded_moto
from worker.app.runtime import aws_clients


@pytest.mark.integration
async def test_seeding_makes_the_history_table_once_and_writes_every_item(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with threaded_moto(monkeypatch.setattr) as endpoint:
        for name, value in aws_environ(endpoint).items():
            monkeypatch.setenv(name, value)
        async with aws_clients(pool_size=4) as clients:
            first = await seeded(clients, 2, prefix="one")
            second = await seeded(clients, 1, prefix="two")  # the table is there already
            tables = (await clients.dynamodb.list_tables())["TableNames"]
            pages = clients.dynamodb.get_paginator("scan").paginate(TableName=TABLE, Select="COUNT")
            counted = sum([page["Count"] async for page in pages])
    assert tables == [TABLE]
    assert sorted(first.conversations) == ["one-0000", "one-0001"]
    assert [c.conversation_id for c in second.pool] == ["two-0000"]
    # Each conversation's messages and its state item.
    assert first.items == sum(c.length + 1 for c in first.pool)
    assert counted == first.items + second.items
