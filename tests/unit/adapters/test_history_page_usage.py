"""The history page reads the bills the writer stores with the answers (``model_usage``).

The answer items are laid out by the prompt-cache stand-in's writer
(:func:`localaws.model_stage.answer_item`), a second implementation of the contract's table,
so these tests check the stage's reader against the layout, not against a copy of itself.
The questions are the stage's own writer's (``message_item``), as the writer stores them.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from localaws.bedrock_cache import STAND_IN_MODEL_ID
from localaws.history_writer import message_item, state_item
from localaws.model_stage import ModelStage, answer_item
from tests.conftest import settings as make_settings
from tests.stored import BROKEN_BILLS, break_bill
from worker.adapters.dynamodb import history_page
from worker.adapters.stored_bills import read_bill
from worker.caching.bills import CacheExpectation, ExpectedPoint, ModelUsage
from worker.memory import FoldState, HistoryMessage, WindowLimits, bound_history, render_converse
from worker.planning import plan_turn
from worker.turn.commands import ConverseCommand, prompt_payload

CONVERSATION = "matter-1187"
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
SUMMARY = "The matter so far: the lease, its clause 14.2, and the notice served. " * 70
LIMITS = WindowLimits(max_tokens=4000, max_messages=25, floor_messages=10, message_max_tokens=1000)
ALIGNED = make_settings(history_window_mode="cache-aligned", model_id=STAND_IN_MODEL_ID).plan_config


def question(turn: int) -> str:
    return f"Question {turn}: what does clause {turn}.2 say about notice? " * 8


def answer_text(turn: int) -> str:
    return f"Answer {turn}: clause {turn}.2 requires thirty days' written notice. " * 20


def conversation(turns: int, *, billed: bool = True) -> list[dict[str, Any]]:
    """The items of ``turns`` exchanges, oldest first: each question stored by the writer,
    its prompt built by the stage's own plan and payload code, answered by the stand-in
    model stage a minute later, and stored by the stand-in's writer (without ``model_usage``
    when not ``billed``: an older writer)."""
    model = ModelStage()
    items: list[dict[str, Any]] = [state_item(CONVERSATION, folded_through=0, summary=SUMMARY)]
    for turn in range(1, turns + 1):
        asked = T0 + timedelta(minutes=2 * turn)
        page = history_page(query(items))  # type: ignore[arg-type]
        plan = plan_turn(page, question(turn), sent_at=asked, config=ALIGNED)
        command = ConverseCommand(
            type="converse",
            command_id=f"c-{turn}",
            conversation_id=CONVERSATION,
            message=question(turn),
        )
        payload = prompt_payload(
            command, plan.window, page.state, plan.view,
            shown=(plan.summary, plan.folded_through), cache=plan.cache,
        )  # fmt: skip
        answer = model.answer(payload, at=asked + timedelta(minutes=1), content=answer_text(turn))
        seq = 2 * turn
        items.append(message_item(CONVERSATION, seq - 1, "user", question(turn), asked))
        item = answer_item(payload, answer, seq=seq)
        if not billed:
            del item["model_usage"]
        items.append(item)
    return items


def query(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A Query's response: the ``state`` item first, then the messages newest first."""
    return {"Items": [items[0], *reversed(items[1:])]}


def test_the_page_holds_the_answers_bills_newest_first() -> None:
    items = conversation(4)
    page = history_page(query(items))  # type: ignore[arg-type]
    assert [u.seq for u in page.usage] == [8, 6, 4, 2]
    assert [m.seq for m in page.messages] == list(range(8, 0, -1))
    for usage in page.usage:
        [item] = [i for i in items if i["sk"]["S"] == f"msg#{usage.seq:012d}"]
        stored = item["model_usage"]["M"]
        assert usage.input_tokens == int(stored["inputTokens"]["N"])
        assert usage.read_tokens == int(stored["cacheReadInputTokens"]["N"])
        assert usage.write_tokens == int(stored["cacheWriteInputTokens"]["N"])
        assert usage.written_5m + usage.written_1h == usage.write_tokens
        assert usage.command_id == f"c-{usage.seq // 2}"
        assert usage.answered_at == T0 + timedelta(minutes=usage.seq + 1)
        assert usage.expected is not None
    # The stand-in read the prefix the stage shared with the previous prompt.
    assert page.usage[0].read_tokens > 0


def test_the_bill_reads_back_what_the_writer_was_given() -> None:
    """GIVEN one turn answered by the stand-in, WHEN its item is read, THEN the bill is the
    stand-in's usage and the payload's ``cache`` block, as they were."""
    model = ModelStage()
    window = bound_history([HistoryMessage(1, "user", question(0))], LIMITS)
    view = render_converse(window, question(1), SUMMARY, cache_history=True)
    command = ConverseCommand(
        type="converse", command_id="c-9", conversation_id=CONVERSATION, message=question(1)
    )
    cache = CacheExpectation(1_500, 0, (ExpectedPoint("5m", 1_300), ExpectedPoint("5m", 1_450)))
    payload = prompt_payload(command, window, FoldState(summary=SUMMARY), view, cache=cache)
    answer = model.answer(payload, at=T0, content=answer_text(1))
    item = answer_item(payload, answer, seq=2)
    usage = read_bill(item["model_usage"], 2)
    assert isinstance(usage, ModelUsage)
    details = {d["ttl"]: d["inputTokens"] for d in answer.usage["cacheDetails"]}
    assert (usage.seq, usage.input_tokens, usage.read_tokens, usage.write_tokens) == (
        2,
        answer.usage["inputTokens"],
        answer.usage["cacheReadInputTokens"],
        answer.usage["cacheWriteInputTokens"],
    )
    assert (usage.written_5m, usage.written_1h) == (details.get("5m", 0), details.get("1h", 0))
    assert (usage.answered_at, usage.command_id, usage.expected) == (T0, "c-9", cache)


def test_a_bill_on_a_question_is_not_read() -> None:
    """Only an answer carries a bill: ``model_usage`` on a user item is left alone."""
    items = conversation(2)
    [answer] = [i for i in items if i["sk"]["S"] == "msg#000000000004"]
    [asked] = [i for i in items if i["sk"]["S"] == "msg#000000000003"]
    asked["model_usage"] = answer["model_usage"]
    page = history_page(query(items))  # type: ignore[arg-type]
    assert [u.seq for u in page.usage] == [4, 2]


def test_a_malformed_bill_is_dropped_whole_with_its_reason_and_its_answer_kept() -> None:
    """GIVEN answers whose ``model_usage`` is not a map, lacks Converse's counts, or holds a
    count that is not a number, THEN no bill is read from them, each is dropped with the
    attribute and why, and every message is on the page, uncounted as malformed."""
    items = conversation(3)
    by_seq = {int(i["seq"]["N"]): i for i in items[1:]}
    by_seq[6]["model_usage"] = {"S": "a bill"}
    by_seq[4]["model_usage"] = {"M": {"outputTokens": {"N": "12"}}}
    by_seq[2]["model_usage"]["M"]["inputTokens"] = {"S": "many"}
    page = history_page(query(items))  # type: ignore[arg-type]
    assert page.usage == ()
    assert [(d.seq, d.attribute, d.reason) for d in page.bills_dropped] == [
        (6, "model_usage", "a string, not a map"),
        (4, "model_usage.inputTokens", "missing"),
        (2, "model_usage.inputTokens", "a string, not a number"),
    ]
    assert [m.seq for m in page.messages] == [6, 5, 4, 3, 2, 1]
    assert page.malformed == ()


def test_a_malformed_expected_block_drops_the_bill_whole_never_half_used() -> None:
    items = conversation(2)
    items[-1]["model_usage"]["M"]["expected"] = {"M": {"points": {"S": "none"}}}
    page = history_page(query(items))  # type: ignore[arg-type]
    assert [u.seq for u in page.usage] == [2]
    assert [(d.seq, d.attribute) for d in page.bills_dropped] == [
        (4, "model_usage.expected.prompt_tokens")
    ]


def test_an_older_writers_answers_give_a_page_without_bills() -> None:
    billed = history_page(query(conversation(3)))  # type: ignore[arg-type]
    unbilled = history_page(query(conversation(3, billed=False)))  # type: ignore[arg-type]
    assert unbilled.usage == ()
    assert unbilled.messages == billed.messages
    assert unbilled.state == billed.state


SLIDING = make_settings().plan_config


@pytest.mark.parametrize("how", BROKEN_BILLS)
@pytest.mark.parametrize("seq", [6, 10])
def test_a_malformed_bill_changes_nothing_but_its_own_absence(how: str, seq: int) -> None:
    """GIVEN a conversation whose answer at ``seq`` (an older one, or the newest) holds a
    malformed bill, THEN each mode's plan (the calibration, what is alive, the check, the view
    and its cache block) is the plan of the same conversation with no bill on that answer."""
    items = conversation(5)
    [index] = [i for i, item in enumerate(items) if item.get("seq") == {"N": str(seq)}]
    broken, without = copy.deepcopy(items), copy.deepcopy(items)
    break_bill(broken[index], how)
    del without[index]["model_usage"]
    sent_at = T0 + timedelta(minutes=13)
    for config in (SLIDING, ALIGNED):
        planned = [
            plan_turn(history_page(query(page)), question(6), sent_at=sent_at, config=config)  # type: ignore[arg-type]
            for page in (broken, without)
        ]
        assert planned[0].page.bills_dropped[0].seq == seq
        assert planned[1].page.bills_dropped == ()
        assert planned[0].observed == planned[1].observed
        assert (planned[0].view, planned[0].cache) == (planned[1].view, planned[1].cache)
