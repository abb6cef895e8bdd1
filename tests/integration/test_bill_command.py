"""``worker bill`` against the moto server, over answers the model stage's stand-in gave and
stored (``localaws.model_stage``): each bill as it was stored, read back turn by turn, no
content, and the sliding window's estimate marked as one."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from localaws.bedrock_cache import STAND_IN_MODEL_ID
from localaws.history_writer import message_item
from localaws.model_stage import ModelAnswer, ModelStage, answer_item, put_answer_async
from tests.integration.conftest import Stack, running_worker
from worker.adapters.dynamodb import rfc3339

pytestmark = pytest.mark.integration

SECRET = "PRIVILEGED"
CONVERSATION = "matter-b1"
START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
#: When each question is sent: two minutes apart, then a 20-minute pause (a 5m entry dies).
MOMENTS = [START + timedelta(minutes=m) for m in (0, 2, 4, 24)]


async def bill_command(stack: Stack, *args: str) -> str:
    return await stack.cli_output("bill", "--conversation", CONVERSATION, *args)


async def served(stack: Stack) -> list[tuple[int, str, ModelAnswer]]:
    """Fifteen seeded exchanges (an older writer: no bills), then four turns the real worker
    forwards (cache-aligned) and the stand-in answers at the question's moment + 5 s; the
    question and the answer (with ``model_usage``) are stored after each. Returns each
    answer's seq, command id and answer."""
    exchanges = [
        (role, f"{SECRET} {role} {i} " + "clause " * 60)
        for i in range(15)
        for role in ("user", "assistant")
    ]
    await stack.seed(CONVERSATION, exchanges, folded_through=20, summary=f"{SECRET} summary " * 30)
    model, newest, answers = ModelStage(), len(exchanges), []
    table = stack.env["HISTORY_TABLE"]
    async with running_worker(
        stack.settings(history_window_mode="cache-aligned", model_id=STAND_IN_MODEL_ID)
    ):
        for number, sent_at in enumerate(MOMENTS, start=1):
            command_id, question = f"c-{number}", f"{SECRET} question {number}"
            await stack.send_command(
                command_id=command_id,
                conversation_id=CONVERSATION,
                message=question,
                sent_at=rfc3339(sent_at),
            )
            [prompt] = await stack.drain("MODEL_QUEUE_URL", expect=1)
            await stack.until_empty("CONVERSE_QUEUE_URL")  # its anchor write came before
            payload: dict[str, Any] = prompt["ResolvedPayload"]
            answer = model.answer(
                payload, at=sent_at + timedelta(seconds=5), content=f"{SECRET} answer {number}"
            )
            await stack.put_items(
                [message_item(CONVERSATION, newest + 1, "user", question, sent_at)]
            )
            await put_answer_async(
                stack.clients.dynamodb, table, answer_item(payload, answer, seq=newest + 2)
            )
            newest += 2
            answers.append((newest, command_id, answer))
    return answers


def units(usage: dict[str, Any]) -> float:
    """The contract's prices: uncached 1x, read 0.1x, written 1.25x (5m) or 2x (1h)."""
    by_ttl = {d["ttl"]: d["inputTokens"] for d in usage["cacheDetails"]}
    return (
        usage["inputTokens"]
        + 0.1 * usage["cacheReadInputTokens"]
        + 1.25 * by_ttl.get("5m", 0)
        + 2.0 * by_ttl.get("1h", 0)
    )


async def test_the_bill_lists_each_stored_answers_usage_turn_by_turn_without_content(
    stack: Stack,
) -> None:
    """GIVEN a conversation whose last four answers the stand-in gave and stored with their
    bills, WHEN an operator runs `worker bill`, THEN each of them is a line with the
    stand-in's own usage and its billed units, the older answers are listed as having no
    bill, the totals add up, the sliding window's figure is called an estimate, and no
    message or summary text is printed."""
    answers = await served(stack)

    output = await bill_command(stack)
    lines = output.splitlines()
    assert SECRET not in output and "clause" not in output
    assert lines[0].startswith(f"conversation {CONVERSATION}: the bill, observed")
    assert lines[1] == "history: 38 messages read in 1 Query; 4 answers with a bill, 15 without"
    assert lines[3].split()[:3] == ["seq", "answered_at", "command"]
    assert lines[4] == "    2-30  no bill stored (15 answers)"
    for line, (seq, command_id, answer) in zip(lines[5:9], answers, strict=True):
        usage = answer.usage
        by_ttl = {d["ttl"]: d["inputTokens"] for d in usage["cacheDetails"]}
        cells = line.split()
        assert cells[:3] == [str(seq), rfc3339(answer.answered_at), command_id]
        figures = [int(cell.replace(",", "")) for cell in cells[3:7]]
        assert figures == [
            usage["inputTokens"],
            usage["cacheReadInputTokens"],
            by_ttl.get("5m", 0),
            by_ttl.get("1h", 0),
        ]
        assert cells[7] == f"{units(usage):,.2f}"
    # The stand-in read the prefix the turn before wrote (two minutes on, alive).
    assert answers[1][2].usage["cacheReadInputTokens"] > 0
    total = sum(units(answer.usage) for _, _, answer in answers)
    assert re.fullmatch(
        rf"observed, 4 answers: .*; billed {total:,.2f} input-token units \(.*\)", lines[9]
    )
    assert lines[10].startswith("misses: ")
    assert lines[11].startswith("sliding window, ESTIMATED for the same 4 turns (")

    bill = json.loads(await bill_command(stack, "--json"))
    assert [a["seq"] for a in bill["answers"]] == [seq for seq, _, _ in answers]
    assert [a["billed_units"] for a in bill["answers"]] == [units(a.usage) for _, _, a in answers]
    assert bill["unbilled"] == [{"first_seq": 2, "last_seq": 30, "count": 15}]
    assert bill["sliding_estimate"]["estimate"] is True
    assert SECRET not in json.dumps(bill)
