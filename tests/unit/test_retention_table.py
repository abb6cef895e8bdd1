"""docs/RETENTION.md lists every copy the stage makes: a test fails when the code writes an
attribute, an object kind or a record the page does not list, and when ``worker erase`` would
leave a ``state`` attribute the stage writes.

What the code writes is read from the code itself, never from a list kept here: every write
request the adapters build (found by their return type, so a new builder is found too) with
the attribute names of its item or its update expression, the keys the payload key scheme
makes for each kind, and the attributes a dead letter leaves with (the consumer settling a
rejected and a retry-exhausted command, through the offloading sender).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, Unpack

import pytest

import worker.adapters
from tests.expressions import expression_names, written_attributes
from tests.unit.consumer.test_consumer import Run, messages, policy
from worker.adapters import dynamodb, erasure, ledger_records, reachability
from worker.adapters.dynamodb import STATE_KEY
from worker.caching.anchor import SummarySnapshot, WindowAnchor
from worker.delivery.outcomes import Rejected, Retry
from worker.memory import CompactionPlan, FoldState
from worker.ports import CommandHold, DoneMark, FoldClaim, MessageDigest, SendOptions
from worker.turn.payloads import (
    OWNER_HEX_DIGITS,
    OffloadingSender,
    PayloadKind,
    conversation_prefix,
    payload_key,
)

RETENTION = Path(__file__).resolve().parents[2] / "docs" / "RETENTION.md"
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
#: Return types of a request that writes an item.
WRITES = re.compile(r"\b(UpdateItem|PutItem|BatchWriteItem|DeleteItem|TransactWriteItems)Input")
#: ``worker erase``'s own requests only remove copies: they add none to list.
#: Modules whose write requests make no copy: the operator's deletes, and the start-up
#: checks, whose updates carry a condition no item meets (checked below).
NOT_COPIES = {erasure, reachability}


def row(name: str) -> list[str]:
    """The backquoted terms of the row of "Every copy the stage makes" named ``name``."""
    text = RETENTION.read_text(encoding="utf-8")
    section = text.split("## Every copy the stage makes", 1)[1].split("\n#", 1)[0]
    [line] = [line for line in section.splitlines() if line.startswith(f"| **{name}** |")]
    return re.findall(r"`([^`]+)`", line)


def unlisted(written: set[str], listed: list[str]) -> set[str]:
    return written - set(listed)


HOLD = CommandHold("matter-1", "c-1", "w/m/1")
DIGEST = MessageDigest.drawn("What does clause 14.2 say?")
SNAPSHOTS = [SummarySnapshot("summary", 6), SummarySnapshot(None, 6), None]
ANCHORS = [WindowAnchor(3, 6, snapshot) for snapshot in SNAPSHOTS]
SEEN = [FoldState(), FoldState(6, "s", 20, NOW, 2)]
CLAIMS = [FoldClaim("matter-1", CompactionPlan(6, 30, 900), seen, NOW) for seen in SEEN]

#: Every write builder of the adapters, called every way the stage calls it.
LEDGER_WRITES: dict[str, list[dict[str, Any]]] = {
    "claim_request": [
        dict(ledger_records.claim_request("t", HOLD, lease=timedelta(60), now=NOW, digest=DIGEST))
    ],
    "takeover_request": [
        dict(ledger_records.takeover_request("t", HOLD, lease=timedelta(60), now=NOW, digest=d))
        for d in (DIGEST, None)
    ],
    "lease_request": [dict(ledger_records.lease_request("t", HOLD, until=1))],
    "done_marks_request": [
        dict(put["PutRequest"])
        for put in ledger_records.done_marks_request(
            "t", [DoneMark("m", "c-1", "w", NOW, DIGEST), DoneMark("m", "c-2", "w", NOW, None)]
        )["RequestItems"]["t"]
    ],
}
STATE_WRITES: dict[str, list[dict[str, Any]]] = {
    "anchor_request": [dict(dynamodb.anchor_request("t", "matter-1", a)) for a in ANCHORS],
    "fold_claim_request": [
        dict(dynamodb.fold_claim_request("t", claim, anchor=anchor))
        for claim in CLAIMS
        for anchor in (*ANCHORS, None)
    ],
    "fold_release_request": [dict(dynamodb.fold_release_request("t", c)) for c in CLAIMS],
}


def attributes_written(requests: dict[str, list[dict[str, Any]]]) -> set[str]:
    return {name for calls in requests.values() for c in calls for name in written_attributes(c)}


def write_builders(module: ModuleType) -> set[str]:
    """The module's functions that build a write request, found by their return type."""
    return {
        name
        for name, function in inspect.getmembers(module, inspect.isfunction)
        if function.__module__ == module.__name__
        and WRITES.search(str(function.__annotations__.get("return", "")))
    }


def test_every_write_builder_of_the_adapters_is_read_here() -> None:
    """A new builder of a write fails this until the tests below read what it writes."""
    adapters = [
        module
        for info in pkgutil.iter_modules(worker.adapters.__path__)
        if (module := importlib.import_module(f"worker.adapters.{info.name}")) not in NOT_COPIES
    ]
    found = {(module.__name__, name) for module in adapters for name in write_builders(module)}
    read = {(ledger_records.__name__, name) for name in LEDGER_WRITES}
    read |= {(dynamodb.__name__, name) for name in STATE_WRITES}
    assert found == read


def test_the_start_up_checks_writes_never_apply() -> None:
    """Their UpdateItems prove a right and write nothing: each carries the condition no item
    meets, so they are no copy of anything."""
    builders = write_builders(reachability)
    assert builders
    for name in builders - {"never_applied_update"}:
        request = getattr(reachability, name)("t")
        assert request["ConditionExpression"] == reachability.NEVER, name


def test_the_table_lists_every_attribute_of_a_command_record() -> None:
    listed = row("Command records")
    assert unlisted(attributes_written(LEDGER_WRITES), listed) == set()
    assert f"{ledger_records.COMMAND_PREFIX}<command_id>" in listed
    assert "LEDGER_TABLE" in listed


def test_the_table_lists_every_state_attribute_the_stage_writes() -> None:
    listed = row("Conversation state, the stage's attributes")
    assert unlisted(attributes_written(STATE_WRITES), listed) == set()
    assert STATE_KEY in listed


def test_erase_removes_exactly_the_state_attributes_the_stage_writes() -> None:
    """Every one (a new one fails this until erase removes it too), and none of the writer's."""
    request = erasure.state_erase_request("t", "matter-1")
    removed = expression_names(request["UpdateExpression"], request["ExpressionAttributeNames"])
    assert removed == attributes_written(STATE_WRITES)
    assert request["UpdateExpression"].startswith("REMOVE ")
    assert not {"folded_through", "fold_summary"} & removed


def key_pattern(key: str) -> str:
    """A key as the table spells it: the owner and the leaf named, not shown."""
    owner = rf"(?<=^payloads/)[0-9a-f]{{{OWNER_HEX_DIGITS}}}(?=/)"
    return re.sub(r"[0-9a-f]{64}(?=\.json$)", "<sha256>", re.sub(owner, "<conversation>", key))


def test_the_table_lists_every_kind_of_payload_object() -> None:
    listed = row("Payload objects")
    keys = [payload_key("matter-1", "c-1", kind) for kind in PayloadKind]
    keys.append(payload_key(None, "m-1", PayloadKind.DEAD_LETTER))
    assert {key_pattern(key) for key in keys} - set(listed) == set()
    assert key_pattern(conversation_prefix("matter-1")) == "payloads/<conversation>/"
    assert "PAYLOAD_BUCKET" in listed


class Captured:
    def __init__(self) -> None:
        self.attributes: set[str] = set()

    async def send(self, body: str, **options: Unpack[SendOptions]) -> str:
        self.attributes |= set(options.get("attributes") or {})
        return "id"


class NoStore:
    async def put(self, bucket: str, key: str, data: bytes) -> None:
        return None

    async def get(self, bucket: str, key: str, *, max_bytes: int) -> bytes:
        raise AssertionError


@pytest.mark.parametrize(
    ("outcome", "receive_count"),
    [(Rejected("message is blank"), 1), (Retry("dynamodb.Query failed"), 5)],
    ids=["rejected", "retries-exhausted"],
)
async def test_the_table_lists_every_attribute_of_a_dead_letter(
    outcome: Rejected | Retry, receive_count: int
) -> None:
    run = Run()
    run.queue.put(*messages(1, receive_count=receive_count))
    run.stage.outcome = outcome
    run.start(replace(policy(), max_receive_count=5))
    await run.stop_at(1.0)
    [(body, attributes)] = run.queue.sent
    offloaded = Captured()
    sender = OffloadingSender(
        offloaded, NoStore(), bucket="b", inline_max_bytes=1, kind=PayloadKind.DEAD_LETTER
    )
    await sender.send(body, group_id="m0", deduplication_id="m0", attributes=attributes)
    assert set(attributes) <= offloaded.attributes
    assert unlisted(offloaded.attributes, row("Dead letters")) == set()


def test_a_check_finds_an_attribute_added_to_a_builder() -> None:
    """The checks above are not vacuous: a claim that wrote one more attribute, or a record
    with one more, is reported as unlisted."""
    claim = dict(LEDGER_WRITES["claim_request"][0])
    claim["UpdateExpression"] += ", new_attribute = :x"
    record = {"Item": {**LEDGER_WRITES["done_marks_request"][0]["Item"], "other": {"S": "x"}}}
    listed = row("Command records")
    assert unlisted(attributes_written({"claim": [claim]}), listed) == {"new_attribute"}
    assert unlisted(attributes_written({"done": [record]}), listed) == {"other"}
    anchor = dict(STATE_WRITES["anchor_request"][0])
    anchor["UpdateExpression"] = anchor["UpdateExpression"].replace("SET ", "SET #n = :n, ")
    anchor["ExpressionAttributeNames"] = {"#n": "window_extra"}
    listed = row("Conversation state, the stage's attributes")
    assert unlisted(attributes_written({"anchor": [anchor]}), listed) == {"window_extra"}
