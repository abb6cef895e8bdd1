"""A turn's memory over in-memory fakes: how far it reads, what it logs, how it claims a fold.

The fakes behave as the history table does: a Query returns the ``state`` item and then
the newest messages, stops at its limit and says where the next older page starts; a
claim is a conditional write on the request mark's version.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.conftest import captured_logs
from tests.unit.fakes import NOW, HistoryTable, MemoryQueue, memory_stage
from worker.errors import StoreUnavailable
from worker.memory import CompactionPlan, FoldState
from worker.ports import CommandClaim
from worker.settings import Settings
from worker.turn.commands import ConverseCommand
from worker.turn.stage import ConverseStage
from worker.turn.writing import maybe_enqueue_compaction

UNREACHABLE = StoreUnavailable("sqs.SendMessage: the endpoint did not answer")

SETTINGS = Settings.at_defaults()


class NoLedger:
    async def begin(self, *_: Any, **__: Any) -> CommandClaim:
        return CommandClaim(state="started")

    async def renew(self, *_: Any, **__: Any) -> bool:
        return True

    async def finish(self, *_: Any, **__: Any) -> None:
        return None

    async def abandon(self, *_: Any, **__: Any) -> None:
        return None


def stage_over(history: HistoryTable, model: MemoryQueue, compaction: MemoryQueue) -> ConverseStage:
    return memory_stage(
        history=history,
        ledger=NoLedger(),
        model_queue=model,
        compaction_queue=compaction,
        settings=SETTINGS,
    )


COMMAND = ConverseCommand(
    type="converse", command_id="c-1", conversation_id="matter-1", message="And clause 9?"
)


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name]


async def test_a_run_of_answers_longer_than_the_page_still_opens_on_its_question() -> None:
    """GIVEN one question followed by 30 stored answers (the page holds 26 messages),
    WHEN a turn bounds the history, THEN it reads one page further, the window opens on
    the question, and the extra Query is counted in the window's log line."""
    history = HistoryTable(state=FoldState())
    history.append(("user", "Summarise the agreement, part by part."))
    history.append(*[("assistant", f"Part {i}.") for i in range(30)])
    model = MemoryQueue()
    with captured_logs() as logs:
        await stage_over(history, model, MemoryQueue()).forward(COMMAND)
    [payload] = model.sent
    assert [m["seq"] for m in payload["history"]] == list(range(1, 32))
    assert payload["history"][0]["role"] == "user"
    assert len(history.queries) == 2
    [bounded] = events(logs, "clerk.converse_history_window_bounded")
    assert (bounded["extra_queries"], bounded["kept"], bounded["dropped"]) == (1, 31, 0)


async def test_a_run_of_answers_is_read_no_further_than_its_question() -> None:
    history = HistoryTable(state=FoldState())
    history.append(*[("user", "q"), ("assistant", "a")] * 20)  # seqs 1-40
    history.append(("user", "Summarise the agreement."))
    history.append(*[("assistant", f"Part {i}.") for i in range(60)])  # seqs 42-101
    model = MemoryQueue()
    await stage_over(history, model, MemoryQueue()).forward(COMMAND)
    [payload] = model.sent
    assert payload["history"][0] == {
        "seq": 41,
        "role": "user",
        "content": "Summarise the agreement.",
    }
    assert len(history.queries) == 3  # 26 + 26 answers, then the page holding the question


async def test_a_turn_costs_one_query_when_the_floor_opens_on_a_question() -> None:
    history = HistoryTable(state=FoldState(folded_through=40, summary="folded"))
    history.append(*[("user", "q"), ("assistant", "a")] * 100)
    model = MemoryQueue()
    with captured_logs() as logs:
        await stage_over(history, model, MemoryQueue()).forward(COMMAND)
    assert history.queries == [None]
    [bounded] = events(logs, "clerk.converse_history_window_bounded")
    assert bounded["extra_queries"] == 0


async def test_answers_that_reach_the_conversations_start_need_no_further_read() -> None:
    """A greeting run at seq 1 has no question to find: the whole conversation is one
    short page, so nothing more is read."""
    history = HistoryTable()
    history.append(*[("assistant", "Hello.")] * 12)
    model = MemoryQueue()
    await stage_over(history, model, MemoryQueue()).forward(COMMAND)
    assert history.queries == [None]
    assert len(model.sent[0]["history"]) == 12


async def test_the_fold_gap_warning_names_the_unfolded_seqs_the_window_dropped() -> None:
    history = HistoryTable(state=FoldState(folded_through=4, summary="folded"))
    history.append(*[("user", "q" * 400), ("assistant", "a" * 4000)] * 20)
    with captured_logs() as logs:
        await stage_over(history, MemoryQueue(), MemoryQueue()).forward(COMMAND)
    [gap] = events(logs, "clerk.converse_history_fold_gap")
    assert (gap["first_seq"], gap["last_seq"], gap["unfolded_dropped"]) == (5, 30, 26)
    assert gap["log_level"] == "warning"


# --- the fold request -----------------------------------------------------------------------


async def test_a_failed_send_of_a_fold_request_releases_the_claim() -> None:
    """GIVEN a fold due and a compaction queue that fails, WHEN the turn asks for the
    fold, THEN the claim is put back as it was, so the next turn asks again at once."""
    history = HistoryTable(state=FoldState())
    history.append(*[("user", "q"), ("assistant", "a")] * 10)
    page = await history.load_page("matter-1", SETTINGS.history_page_size)
    compaction = MemoryQueue(error=UNREACHABLE)
    stage = stage_over(history, MemoryQueue(), compaction)
    with captured_logs() as logs:
        await stage.request_fold(COMMAND, page)
    assert history.claims == [20]
    assert history.state == FoldState()  # the mark and its version as they were
    [failed] = events(logs, "clerk.converse_compaction_request_failed")
    assert "did not answer" in failed["error"]

    compaction.error = None
    await stage.request_fold(COMMAND, await history.load_page("matter-1", 27))
    [request] = compaction.sent
    assert (request["folded_through"], request["through"]) == (0, 20)
    assert history.state is not None and history.state.requested_through == 20


async def test_a_send_that_is_cancelled_also_releases_the_claim() -> None:
    history = HistoryTable(state=FoldState())
    history.append(*[("user", "q"), ("assistant", "a")] * 10)
    page = await history.load_page("matter-1", 27)

    async def cancelled(plan: CompactionPlan) -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await maybe_enqueue_compaction(
            "matter-1",
            page.messages,
            page.state,
            older_unread=False,
            limits=SETTINGS.fold_limits,
            claims=history,
            send=cancelled,
            now=NOW,
        )
    assert history.state == FoldState()


async def test_two_workers_that_planned_from_one_state_send_one_request() -> None:
    """Both read the same state and find the same fold due; the second claim finds the
    mark moved and sends nothing."""
    history = HistoryTable(state=FoldState())
    history.append(*[("user", "q"), ("assistant", "a")] * 10)
    first = await history.load_page("matter-1", 27)
    second = await history.load_page("matter-1", 27)
    compaction = MemoryQueue()
    stage = stage_over(history, MemoryQueue(), compaction)
    await stage.request_fold(COMMAND, first)
    await stage.request_fold(replace_command("c-2"), second)
    assert len(compaction.sent) == 1


async def test_requests_pipeline_while_the_fold_lags() -> None:
    """GIVEN a compactor that never answers, WHEN the tail keeps growing, THEN a request
    leaves for each new stretch of twelve messages, each above the last."""
    history = HistoryTable(state=FoldState())
    compaction = MemoryQueue()
    stage = stage_over(history, MemoryQueue(), compaction)
    for turn in range(1, 31):
        history.append(("user", f"q{turn}"), ("assistant", f"a{turn}"))
        await stage.request_fold(replace_command(f"c-{turn}"), await history.load_page("m", 27))
    throughs = [body["through"] for body in compaction.sent]
    assert throughs == [12, 24, 36, 48, 60]
    assert {body["folded_through"] for body in compaction.sent} == {0}


def replace_command(command_id: str) -> ConverseCommand:
    return COMMAND.model_copy(update={"command_id": command_id})
