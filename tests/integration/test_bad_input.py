"""A few hundred bad bodies, valid commands among them: every bad one reaches the DLQ with
a reason, every valid one is served, and the worker keeps going."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import pytest

from tests.conftest import captured_logs
from tests.integration.conftest import Stack, body_of, exchanges, running_worker

pytestmark = pytest.mark.integration

#: Valid text that SQS refuses raw in a body (U+FFFE), so it must travel JSON-escaped.
NONCHARACTERS = "noncharacter \ufffe and \uffff, emoji \U0001f4dc"
VALID = {"type": "converse", "command_id": "c", "conversation_id": "matter-z", "message": "q?"}


def bad_bodies(rng: random.Random) -> Iterator[str]:
    """Bodies SQS accepts but the contract rejects. (Invalid UTF-8 cannot be sent at all:
    SQS refuses such a body at SendMessage; JSON-escaped lone surrogates, which decode to
    no valid text, stand in for it.)"""
    for _ in range(25):
        yield "".join(rng.choice('{}[]":,ab1 \\') for _ in range(rng.randint(1, 40)))
    yield from ["", " ", "null", "true", "42", '"converse"', "[]", "{}", "{", "}"]
    yield "[" * 5_000 + "]" * 5_000
    yield '{"a":' * 3_000 + "1" + "}" * 3_000
    yield json.dumps({"type": "converse", "pad": "x" * 200_000})
    yield "9" * 5_000  # an integer past Python's digit limit
    for field in ("type", "command_id", "conversation_id", "message"):
        missing = {k: v for k, v in VALID.items() if k != field}
        yield json.dumps(missing)
        for wrong in (None, 7, 1.5, True, [], {}, ["x"]):
            yield json.dumps({**VALID, field: wrong})
    for field, size in (("command_id", 129), ("conversation_id", 257)):
        yield json.dumps({**VALID, field: "x" * size})
    for field in ("command_id", "conversation_id", "message"):
        yield json.dumps({**VALID, field: ""})
    for kind in ("compact", "prompt", "Converse", "converse ", ""):
        yield json.dumps({**VALID, "type": kind})
    yield json.dumps({**VALID, "sent_at": 20261130})
    for lone in ("\ud800", "\udc80", "tail \udfff"):
        yield json.dumps({**VALID, "message": lone})
    for _ in range(170):
        noisy = {**VALID}
        field = rng.choice(list(VALID))
        noisy[field] = rng.choice([None, rng.randint(-9, 9), [noisy[field]], {"v": 1}, ""])
        yield json.dumps(noisy)


def valid_bodies(count: int) -> Iterator[tuple[str, str]]:
    """(command id, body): plain, with extra fields, with escapes SQS would refuse raw."""
    for i in range(count):
        command = {**VALID, "command_id": f"ok-{i}"}
        if i % 3 == 1:
            command |= {"extra": {"nested": [1, 2]}, "sent_at": "2026-11-30T09:00:00Z"}
        if i % 3 == 2:
            command["message"] = NONCHARACTERS
        yield command["command_id"], json.dumps(command)


async def test_bad_input_is_dead_lettered_with_reasons_and_valid_commands_are_served(
    stack: Stack,
) -> None:
    rng = random.Random(1187)
    bad = list(bad_bodies(rng))
    valid = list(valid_bodies(40))
    assert len(bad) >= 250
    await stack.seed("matter-z", exchanges(3))
    bodies = [*bad, *(body for _, body in valid)]
    rng.shuffle(bodies)
    sendable = [b for b in bodies if b]  # SQS refuses an empty body outright
    for start in range(0, len(sendable), 10):
        entries = [
            {"Id": str(i), "MessageBody": body}
            for i, body in enumerate(sendable[start : start + 10])
        ]
        response = await stack.clients.sqs.send_message_batch(
            QueueUrl=stack.env["CONVERSE_QUEUE_URL"], Entries=entries
        )
        assert not response.get("Failed")
    expected_bad = len([b for b in bad if b])

    with captured_logs() as logs:
        async with running_worker(stack.settings()):
            served = await stack.drain("MODEL_QUEUE_URL", expect=len(valid), within=120)
            dead = await stack.drain(await stack.dead_letter_url(), expect=expected_bad, within=120)

    assert sorted(body_of(m)["command_id"] for m in served) == sorted(c for c, _ in valid)
    escaped = [body_of(m) for m in served if "noncharacter" in body_of(m)["message"]]
    assert escaped
    assert all(payload["message"] == NONCHARACTERS for payload in escaped)
    assert sorted(m["Body"] for m in dead) == sorted(b for b in bad if b)
    reasons = [m["MessageAttributes"]["RejectionReason"]["StringValue"] for m in dead]
    assert all(
        reason.startswith(("body is", "invalid command:")) or reason == "message is blank"
        for reason in reasons
    )
    assert "message is blank" in reasons  # the fuzz corpus has blank messages
    rejected = [e for e in logs if e["event"] == "clerk.converse_command_rejected"]
    assert len(rejected) == expected_bad
    assert not [e for e in logs if e["event"] == "clerk.converse_command_failed"]
    rendered = repr(logs)
    assert "x" * 1000 not in rendered
    assert await stack.depth("CONVERSE_QUEUE_URL") == 0  # none left in flight to retry
