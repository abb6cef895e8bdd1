"""The bill, observed, through the real worker: the stand-in model stage answers each prompt and
stores the answer with its bill, and the next turn checks it.

One in-process worker (``HISTORY_WINDOW_MODE=cache-aligned``) serves two conversations with
the same script, turn after turn. After each prompt the prompt-cache stand-in
(:class:`localaws.model_stage.ModelStage`, Bedrock's documented rules, one cache per
conversation) answers it at a moment of the script, and the answer item is stored with
:func:`localaws.model_stage.put_answer` over a boto3 client, as the model stage's writer
would: with ``model_usage`` for one conversation, without it for the other (an older
writer). Counsel's questions are stored with ``created_at`` = their command's ``sent_at``.

The script is brisk (a minute between an answer and the next question), but the model
stage answers turn 6 an hour late (its entries dead by then, which the stage could not know
when it sent the prompt), and counsel pauses two hours before turn 9. Nothing waits on the
wall clock: every time is the script's, in ``sent_at`` and the stand-in's ``answered_at``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from localaws.bedrock_cache import STAND_IN_MODEL_ID
from localaws.endpoints import DUMMY_CLIENT_ARGS
from localaws.history_writer import message_item
from localaws.model_stage import ModelStage, answer_item, put_answer, rfc3339
from tests.conftest import captured_logs
from tests.converse_rules import contract_digests
from tests.integration.conftest import Stack, running_worker
from tests.stored import bill_from
from worker.caching.bills import ModelUsage
from worker.memory import estimate_tokens

pytestmark = [pytest.mark.integration, pytest.mark.slow]

START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
TURNS = 10
#: Counsel's pause before each turn's question (after the previous answer), by turn.
PAUSES = {9: timedelta(hours=2)}
BRISK = timedelta(minutes=1)
#: How long the model stage takes to answer each turn's prompt, by turn.
LATE = {6: timedelta(minutes=61)}
PROMPT = timedelta(seconds=5)
OBSERVED = "clerk.converse_cache_observed"
ANCHOR = "clerk.converse_window_anchor"


def question(turn: int) -> str:
    """About 50 estimated tokens."""
    return f"Question {turn}: and what does clause {turn}.2 say of notice? ".ljust(200, "?")


def answer(turn: int) -> str:
    """About 600 estimated tokens: from the third turn the history reaches Sonnet's minimum."""
    return f"Answer {turn}: clause {turn}.2 requires thirty days' notice. ".ljust(2_400, ".")


@dataclass
class Run:
    """One conversation of the script: its writer stores bills (``billed``) or not."""

    conversation_id: str
    billed: bool
    at: datetime = START  # the script's clock: the last answer's moment
    payloads: dict[int, dict[str, Any]] = field(default_factory=dict)


async def serve_turn(
    stack: Stack, runs: list[Run], turn: int, model: ModelStage, dynamodb: Any
) -> None:
    """Send each run's command for ``turn``, take its prompt, let the worker settle, then have
    the stand-in answer it and store the question and the answer."""
    sent: dict[str, datetime] = {}
    for run in runs:
        sent[run.conversation_id] = run.at + PAUSES.get(turn, BRISK)
        await stack.send_command(
            command_id=f"t{turn}",
            conversation_id=run.conversation_id,
            message=question(turn),
            sent_at=rfc3339(sent[run.conversation_id]),
        )
    prompts = await stack.drain("MODEL_QUEUE_URL", expect=len(runs))  # checked as Converse would
    await stack.until_empty("CONVERSE_QUEUE_URL")  # the turn's anchor and fold claim are written
    by_id = {p["ResolvedPayload"]["conversation_id"]: p["ResolvedPayload"] for p in prompts}
    for run in runs:
        payload = by_id[run.conversation_id]
        run.payloads[turn] = payload
        asked = sent[run.conversation_id]
        answered = model.answer(payload, at=asked + LATE.get(turn, PROMPT), content=answer(turn))
        item = answer_item(payload, answered, seq=2 * turn)
        if not run.billed:
            del item["model_usage"]
        await stack.put_items(
            [message_item(run.conversation_id, 2 * turn - 1, "user", question(turn), asked)]
        )
        await asyncio.to_thread(put_answer, dynamodb, stack.env["HISTORY_TABLE"], item)
        run.at = answered.answered_at


def events(logs: list[dict[str, Any]], name: str, run: Run) -> dict[int, dict[str, Any]]:
    """``name``'s events of ``run``, by the turn that logged them."""
    return {
        int(e["command_id"][1:]): e
        for e in logs
        if e["event"] == name and e["conversation_id"] == run.conversation_id
    }


def without_expected_read(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload less what only the bills change: its conversation and the read expected."""
    rest = {k: v for k, v in payload.items() if k != "conversation_id"}
    if "cache" in rest:
        rest["cache"] = {k: v for k, v in rest["cache"].items() if k != "expected_read_tokens"}
    return rest


def view_points(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``converse`` view's cache points, as the payload's ``cache`` names them (each
    prefix's digest as the contract defines it, :func:`tests.converse_rules.contract_digests`)."""
    converse = payload["converse"]
    blocks = [*converse["system"], *(b for m in converse["messages"] for b in m["content"])]
    points, tokens = [], 0
    for block in blocks:
        if "cachePoint" in block:
            points.append({"ttl": block["cachePoint"].get("ttl", "5m"), "prefix_tokens": tokens})
        else:
            tokens += estimate_tokens(block["text"])
    for found, digest in zip(points, contract_digests(converse), strict=True):
        found["prefix_digest"] = digest
    return points


async def test_the_next_turn_checks_each_stored_bill_and_an_older_writer_changes_no_prompt(
    stack: Stack,
) -> None:
    billed = Run("matter-observed-billed", billed=True)
    unbilled = Run("matter-observed-older-writer", billed=False)
    runs = [billed, unbilled]
    model = ModelStage()
    dynamodb = boto3.client("dynamodb", endpoint_url=stack.endpoint, **DUMMY_CLIENT_ARGS)
    settings = stack.settings(
        history_window_mode="cache-aligned",
        model_id=STAND_IN_MODEL_ID,  # the stand-in's cache: 1,024 tokens, 1h honoured
        history_window_max_tokens=16_000,  # the window reaches back to seq 1 all along
        memory_fold_min_tokens=8_000,
    )
    with captured_logs() as logs:
        async with running_worker(settings):
            for turn in range(1, TURNS + 1):
                await serve_turn(stack, runs, turn, model, dynamodb)
    assert stack.prompts_checked == TURNS * len(runs)

    # Every prompt with a cache point says what it expects of the cache, the view's points
    # in order; the first turn's (no history yet) has none.
    for run in runs:
        for turn, payload in run.payloads.items():
            assert ("cache" in payload) == (turn > 1)
            if turn > 1:
                stored = bill_from({"inputTokens": 0, "expected": payload["cache"]})
                assert isinstance(stored, ModelUsage) and stored.expected is not None
                assert payload["cache"]["points"] == view_points(payload)

    # The billed conversation: each turn checks the previous answer's bill.
    checked = events(logs, OBSERVED, billed)
    assert sorted(checked) == list(range(3, TURNS + 1))  # turn 1's prompt expected nothing
    for turn, event in checked.items():
        assert (event["answer_seq"], event["answer_command_id"]) == (2 * turn - 2, f"t{turn - 1}")
        expected = billed.payloads[turn - 1]["cache"]["expected_read_tokens"]
        assert event["expected_read"] == expected
    causes = {turn: event["cause"] for turn, event in checked.items()}
    # The answer the model stage gave an hour late found its entries expired.
    assert causes == {turn: "expired" if turn == 7 else None for turn in checked}
    assert checked[7]["expected_read"] > 0 and checked[7]["read_tokens"] == 0
    brisk = [e for turn, e in checked.items() if turn != 7 and e["expected_read"] > 0]
    assert len(brisk) >= 4  # reads were expected, and made
    assert all(e["read_tokens"] >= 0.9 * e["expected_read_tokens"] for e in brisk)
    # After counsel's two hours away the bills say cold: the window re-anchored, and the
    # prompt expected no read, so its answer's check is no miss.
    anchored = events(logs, ANCHOR, billed)
    assert (anchored[9]["outcome"], anchored[9]["reason"]) == ("reanchored", "cold")
    assert billed.payloads[9]["cache"]["expected_read_tokens"] == 0
    assert checked[10]["cause"] is None

    # The older writer's conversation: no bill, no check; the same prompts but for the read
    # expected, wherever neither conversation re-anchored a cold cache.
    assert events(logs, OBSERVED, unbilled) == {}
    older = events(logs, ANCHOR, unbilled)
    assert (older[7]["outcome"], older[7]["reason"]) == ("reanchored", "cold")  # over an hour
    cold = {
        turn
        for run in runs
        for turn, event in events(logs, ANCHOR, run).items()
        if event["reason"] == "cold"
    }
    compared = [turn for turn in range(1, TURNS + 1) if turn not in cold]
    assert len(compared) >= 5
    for turn in range(1, TURNS + 1):
        assert set(unbilled.payloads[turn]) == set(billed.payloads[turn])
    for turn in compared:
        assert unbilled.payloads[turn]["converse"] == billed.payloads[turn]["converse"]
        assert without_expected_read(unbilled.payloads[turn]) == without_expected_read(
            billed.payloads[turn]
        )
    assert not any("clause 3.2" in str(e) for e in logs)  # no content in any line
