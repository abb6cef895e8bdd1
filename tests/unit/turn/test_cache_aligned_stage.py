"""The stage in the cache-aligned mode, over an in-memory history table: the anchor comes in
the turn's one Query, the view carries the history's cache points, and a new anchor is
stored in as few writes as the turn allows (none when it stays, in the fold claim's write
when the turn claims), a failed write never failing the turn."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from localaws.bedrock_cache import STAND_IN_MODEL_ID
from tests.conftest import captured_logs
from tests.conftest import settings as make_settings
from tests.unit.clock import FakeClock
from tests.unit.fakes import HistoryTable, MemoryQueue, memory_stage
from tests.unit.turn.test_turn_memory import COMMAND, NoLedger, replace_command
from worker.caching.anchor import SNAPSHOT_MAX_BYTES, WindowAnchor
from worker.delivery.outcomes import Done
from worker.errors import StoreUnavailable
from worker.memory import HistoryMessage
from worker.ports import ReceivedMessage
from worker.telemetry import metrics as m
from worker.telemetry.hooks import Telemetry
from worker.telemetry.metrics import MetricsBook
from worker.turn.stage import ConverseStage

ALIGNED = make_settings(history_window_mode="cache-aligned", model_id=STAND_IN_MODEL_ID)
SUMMARY = "The matter so far: the parties and the clauses in dispute."
FIVE_MINUTES = {"cachePoint": {"type": "default", "ttl": "5m"}}
THROTTLED = StoreUnavailable("dynamodb.UpdateItem failed: ThrottlingException (HTTP 400)")


def stage_over(
    table: HistoryTable,
    model: MemoryQueue,
    compaction: MemoryQueue | None = None,
    *,
    settings: Any = ALIGNED,
) -> ConverseStage:
    return memory_stage(
        history=table,
        ledger=NoLedger(),
        model_queue=model,
        compaction_queue=compaction or MemoryQueue(),
        settings=settings,
    )


def delivery(command_id: str, message: str = "And clause 9?") -> ReceivedMessage:
    body = {
        "type": "converse",
        "command_id": command_id,
        "conversation_id": "matter-1",
        "message": message,
    }
    return ReceivedMessage(f"m-{command_id}", "r", json.dumps(body))


def exchanges(table: HistoryTable, count: int, *, chars: int = 40) -> None:
    for i in range(count):
        question, answer = f"q{i} ".ljust(chars, "q"), f"a{i} ".ljust(chars, "a")
        table.append(("user", question), ("assistant", answer))


def folded(summary: str = SUMMARY) -> HistoryTable:
    """Thirty exchanges (60 messages), folded through 56 under ``summary``."""
    table = HistoryTable()
    exchanges(table, 30)
    table.fold(56, summary)
    return table


async def anchored(summary: str = SUMMARY) -> tuple[HistoryTable, MemoryQueue, ConverseStage]:
    """A :func:`folded` conversation whose first turn (``c-1``) is served: it anchored."""
    table, model = folded(summary), MemoryQueue()
    stage = stage_over(table, model)
    await stage.handle(delivery("c-1"))
    return table, model, stage


def cache_points(payload: dict[str, Any]) -> list[tuple[int, int]]:
    return [
        (i, j)
        for i, message in enumerate(payload["converse"]["messages"])
        for j, block in enumerate(message["content"])
        if "cachePoint" in block
    ]


async def test_a_first_turn_anchors_stores_the_anchor_once_and_sets_the_history_point() -> None:
    """GIVEN a folded conversation with no stored anchor, WHEN a turn is served, THEN it
    costs one Query, its view ends the history with a cache point before the current
    message, and the anchor it chose is stored in one write."""
    table, model = folded(), MemoryQueue()
    assert await stage_over(table, model).handle(delivery("c-1")) == Done()
    [payload] = model.sent
    assert table.queries == [None]
    # No created_at on the page: nothing is known of the pace, every point is 5m.
    assert payload["converse"]["system"] == [{"text": SUMMARY}, FIVE_MINUTES]
    *_, answered, current = payload["converse"]["messages"]
    assert answered["content"][-1] == FIVE_MINUTES
    assert current == {"role": "user", "content": [{"text": "And clause 9?"}]}
    assert cache_points(payload) == [(len(payload["converse"]["messages"]) - 2, 1)]
    assert table.writes == ["anchor"]
    assert table.anchor == WindowAnchor(payload["history"][0]["seq"], 56)
    assert payload["history"][0]["seq"] <= 51  # the floor (and everything unfolded) is in


async def test_a_history_that_ends_on_a_question_takes_its_point_inside_that_message() -> None:
    table = HistoryTable()
    exchanges(table, 3)
    table.append(("user", "An unanswered question."))
    model = MemoryQueue()
    await stage_over(table, model).handle(delivery("c-1"))
    [payload] = model.sent
    assert payload["converse"]["messages"][-1]["content"][-3:] == [
        {"text": "An unanswered question."},
        FIVE_MINUTES,
        {"text": "And clause 9?"},
    ]


async def test_a_kept_anchor_writes_nothing_and_the_window_keeps_its_start() -> None:
    table, model, stage = await anchored()
    table.append(("user", "And clause 9?"), ("assistant", "Clause 9 is about notice."))
    await stage.handle(delivery("c-2", "And clause 10?"))
    first, second = model.sent
    assert second["history"][0]["seq"] == first["history"][0]["seq"]
    assert table.writes == ["anchor"]  # the second turn wrote nothing
    assert table.queries == [None, None]


async def test_a_fold_landing_keeps_a_fitting_anchor_and_its_summary_in_the_payload() -> None:
    """GIVEN an anchor stored with its summary (mark 56), WHEN the fold lands at 60 and the
    window still fits, THEN the turn keeps the anchor, writes nothing, and the payload's
    ``memory`` and ``converse.system`` carry the snapshot's summary and mark, not the newest."""
    table, model, stage = await anchored()
    assert table.anchor is not None and table.anchor.snapshot is not None
    assert table.anchor.snapshot.summary == SUMMARY
    table.append(("user", "q"), ("assistant", "a"))
    table.fold(60, SUMMARY + " And more.")
    await stage.handle(delivery("c-2"))
    first, second = model.sent
    assert table.writes == ["anchor"]
    assert second["history"][0]["seq"] == first["history"][0]["seq"]
    assert second["memory"] == {"summary": SUMMARY, "folded_through": 56}
    assert second["converse"]["system"][0] == {"text": SUMMARY}
    assert {m["seq"] for m in second["history"]} >= set(range(57, 63))  # all after mark 56


async def test_an_overflow_after_a_fold_landing_takes_the_newest_summary() -> None:
    """GIVEN a kept anchor whose snapshot lags the fold, WHEN the window outgrows the
    budget, THEN the turn re-anchors with the newest summary and its mark, and stores them."""
    table, model, stage = await anchored()
    table.fold(60, SUMMARY + " And more.")
    table.append(*[("user", "q"), ("assistant", "a")] * 8)  # past the 25-message cap
    await stage.handle(delivery("c-2"))
    assert model.sent[1]["memory"] == {"summary": SUMMARY + " And more.", "folded_through": 60}
    assert table.writes == ["anchor", "claim+anchor"]  # the new anchor rides the fold claim
    assert table.anchor is not None and table.anchor.folded_through == 60
    assert table.anchor.snapshot is not None and table.anchor.snapshot.folded_through == 60


async def test_a_summary_too_large_to_snapshot_re_anchors_when_the_fold_moves() -> None:
    """The contract's fallback: a summary over the snapshot bound is not stored with the
    anchor, and that conversation re-anchors at the next fold landing, as before."""
    huge = "x" * (SNAPSHOT_MAX_BYTES + 1)
    table, model, stage = await anchored(huge)
    assert table.anchor is not None and table.anchor.snapshot is None
    table.append(("user", "q"), ("assistant", "a"))
    table.fold(60, huge + "y")
    with captured_logs() as logs:
        await stage.handle(delivery("c-2"))
    [event] = anchor_events(logs)
    assert (event["outcome"], event["reason"]) == ("reanchored", "fold_moved")
    assert model.sent[1]["memory"]["folded_through"] == 60


async def test_a_turn_that_claims_a_fold_and_re_anchors_makes_one_write() -> None:
    """The anchor rides the claim's conditional write: one UpdateItem, not two."""
    table = HistoryTable()
    exchanges(table, 6)  # 12 unfolded messages: a fold request is due
    compaction = MemoryQueue()
    await stage_over(table, MemoryQueue(), compaction).handle(delivery("c-1"))
    assert len(compaction.sent) == 1
    assert table.writes == ["claim+anchor"]
    assert table.anchor == WindowAnchor(1, 0)
    assert table.state is not None and table.state.requested_through == 12


async def test_a_lost_claim_still_stores_the_anchor_in_a_write_of_its_own() -> None:
    """GIVEN two turns planned from one state, the second's claim is lost: it sends no
    request, but its anchor is still written (one write more, never a missing anchor)."""
    table = HistoryTable()
    exchanges(table, 6)
    stage = stage_over(table, MemoryQueue())
    first = await stage.forward(COMMAND)
    second = await stage.forward(replace_command("c-2"))
    assert first.anchor_to_write is not None and second.anchor_to_write is not None
    await stage.request_fold(COMMAND, first.page, anchor=first.anchor_to_write)
    await stage.request_fold(replace_command("c-2"), second.page, anchor=second.anchor_to_write)
    assert table.writes == ["claim+anchor", "claim+anchor", "anchor"]
    assert table.anchor == second.anchor_to_write


async def test_a_failed_anchor_write_is_a_warning_and_the_turn_is_done() -> None:
    table = HistoryTable(anchor_error=THROTTLED)
    exchanges(table, 5)
    model = MemoryQueue()
    with captured_logs() as logs:
        outcome = await stage_over(table, model).handle(delivery("c-1"))
    assert outcome == Done()
    assert len(model.sent) == 1
    [failed] = [e for e in logs if e["event"] == "clerk.converse_window_anchor_write_failed"]
    assert failed["log_level"] == "warning"
    assert failed["error"] == str(THROTTLED)
    assert (failed["anchor_seq"], failed["anchor_folded_through"]) == (1, 0)
    assert table.anchor is None


async def test_a_stored_anchor_that_is_not_this_historys_re_anchors() -> None:
    """An anchor on an answer (not an exchange start) is refused by the window, never
    obeyed: the turn re-anchors and stores a valid one."""
    table = HistoryTable(anchor=WindowAnchor(seq=4, folded_through=0))
    exchanges(table, 5)
    model = MemoryQueue()
    await stage_over(table, model).handle(delivery("c-1"))
    assert model.sent[0]["history"][0]["seq"] == 1
    assert table.anchor == WindowAnchor(1, 0)


async def test_the_sliding_mode_ignores_a_stored_anchor_and_writes_none() -> None:
    """GIVEN an anchor the cache-aligned mode would keep (seq 29), WHEN the default mode
    serves a turn, THEN its window is the sliding one (from seq 19: 24 messages), its view
    has no history cache point and nothing is written."""
    table = HistoryTable(anchor=WindowAnchor(seq=29, folded_through=40))
    exchanges(table, 21)
    table.fold(40, SUMMARY)
    model = MemoryQueue()
    await stage_over(table, model, settings=make_settings()).handle(delivery("c-1"))
    [payload] = model.sent
    assert payload["history"][0]["seq"] == 19
    assert cache_points(payload) == []
    assert table.writes == []
    aligned = MemoryQueue()
    await stage_over(table, aligned).handle(delivery("c-1"))
    assert aligned.sent[0]["history"][0]["seq"] == 29


async def test_an_empty_conversation_anchors_on_its_first_message_to_come() -> None:
    table = HistoryTable()
    model = MemoryQueue()
    await stage_over(table, model).handle(delivery("c-1"))
    [payload] = model.sent
    assert payload["converse"]["messages"] == [
        {"role": "user", "content": [{"text": "And clause 9?"}]}
    ]
    assert table.anchor == WindowAnchor(1, 0)


# --- visible: the anchor's log line, the window line's field, the metric ------------------


def anchor_events(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == "clerk.converse_window_anchor"]


async def test_every_turn_logs_how_its_window_was_chosen_and_what_it_stores() -> None:
    """Turn by turn: a first turn anchors, the next keeps it, a fold landing keeps it too
    (the snapshot lags the fold by 4 seqs), a window grown past the budget re-anchors
    (overflow) with the newest summary; the line names the anchor in force, the stored
    one, whether the turn writes, and the summary shown."""
    table = HistoryTable()
    exchanges(table, 28)
    table.fold(50, SUMMARY)
    stage = stage_over(table, MemoryQueue())
    seen: list[tuple[Any, ...]] = []
    with captured_logs() as logs:
        await stage.handle(delivery("c-1"))  # first turn: anchored at the budget less headroom
        table.append(("user", "q"), ("assistant", "a"))
        await stage.handle(delivery("c-2"))  # kept
        table.fold(54, SUMMARY + " And more.")
        await stage.handle(delivery("c-3"))  # the fold moved: kept, the snapshot lags
        table.append(*[("user", "q"), ("assistant", "a")] * 4)
        await stage.handle(delivery("c-4"))  # 8 more messages: over the 25-message cap
    for event in anchor_events(logs):
        seen.append((event["outcome"], event["reason"], event["write"], event["stored_seq"]))
        assert event["log_level"] == "info"
    first = anchor_events(logs)[0]["anchor_seq"]
    assert seen == [
        ("reanchored", "first_turn", True, None),
        ("kept", None, False, first),
        ("kept", None, False, first),
        ("reanchored", "overflow", True, first),
    ]
    shown = [(e["summary_folded_through"], e["summary_behind"]) for e in anchor_events(logs)]
    assert shown == [(50, 0), (50, 0), (50, 4), (54, 0)]
    last = anchor_events(logs)[-1]
    assert table.anchor == WindowAnchor(last["anchor_seq"], last["anchor_folded_through"])
    bounded = [e for e in logs if e["event"] == "clerk.converse_history_window_bounded"]
    assert [(e["anchor"], e.get("anchor_reason")) for e in bounded] == [
        ("reanchored", "first_turn"),
        ("kept", None),
        ("kept", None),
        ("reanchored", "overflow"),
    ]


async def test_a_fallback_is_logged_with_its_fold_gap_and_stores_nothing() -> None:
    table = HistoryTable()
    exchanges(table, 30)  # 60 unfolded messages: more than the window's 25
    with captured_logs() as logs:
        await stage_over(table, MemoryQueue()).forward(COMMAND)
    [event] = anchor_events(logs)
    assert (event["outcome"], event["reason"], event["anchor_seq"], event["write"]) == (
        "fallback",
        None,
        None,
        False,
    )
    [gap] = [e for e in logs if e["event"] == "clerk.converse_history_fold_gap"]
    assert (gap["first_seq"], gap["last_seq"]) == (1, 36)


async def test_the_sliding_mode_logs_no_anchor_and_its_window_line_as_before() -> None:
    table = folded()
    with captured_logs() as logs:
        await stage_over(table, MemoryQueue(), settings=make_settings()).forward(COMMAND)
    assert anchor_events(logs) == []
    [bounded] = [e for e in logs if e["event"] == "clerk.converse_history_window_bounded"]
    assert "anchor" not in bounded and "anchor_reason" not in bounded


async def test_no_anchor_line_or_warning_carries_content() -> None:
    secret = "PRIVILEGED settlement figure"
    table = HistoryTable(anchor_error=THROTTLED)
    table.append(("user", secret), ("assistant", secret))
    table.fold(0, secret)
    with captured_logs() as logs:
        await stage_over(table, MemoryQueue()).handle(delivery("c-1", secret))
    assert anchor_events(logs)
    assert secret not in repr(logs)


async def test_the_stages_re_anchors_reach_the_turns_metrics() -> None:
    book = MetricsBook()
    spy = Telemetry(metrics=book, clock=FakeClock())
    table = HistoryTable()
    exchanges(table, 3)
    stage = stage_over(table, MemoryQueue())
    for command_id in ("c-1", "c-2"):  # a first turn anchors, the second keeps it
        message = delivery(command_id)
        with spy.turn(message, received_at=0.0):
            await stage.handle(message)
    tally = book.take()
    assert tally.reanchored == {"first_turn": 1}
    # No timestamps: each view's one cache point (after the history) is 5m.
    assert tally.ttls == {"5m": 2}
    assert tally.counts[m.COMMANDS_SERVED] == 2


# --- cache lifetimes: the pace comes from the page and the command, never the clock --------


def stamped(table: HistoryTable, gaps_seconds: list[float]) -> datetime:
    """Exchanges whose questions were asked ``gaps_seconds`` apart; returns the last one's time."""
    at = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    for i, gap in enumerate(gaps_seconds):
        at += timedelta(seconds=gap)
        seq = len(table.messages) + 1
        table.messages[seq] = HistoryMessage(seq, "user", f"q{i} " * 200, created_at=at)
        table.messages[seq + 1] = HistoryMessage(seq + 1, "assistant", f"a{i} " * 300)
    return at


def timed_delivery(command_id: str, sent_at: datetime | None) -> ReceivedMessage:
    body: dict[str, Any] = {
        "type": "converse",
        "command_id": command_id,
        "conversation_id": "matter-1",
        "message": "And clause 9?",
    }
    if sent_at is not None:
        body["sent_at"] = sent_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return ReceivedMessage(f"m-{command_id}", "r", json.dumps(body))


async def served_at(clock: datetime, table: HistoryTable, sent_at: datetime | None) -> Any:
    model = MemoryQueue()
    stage = memory_stage(
        history=table, ledger=NoLedger(), model_queue=model, settings=ALIGNED, now=clock
    )
    with captured_logs() as logs:
        await stage.handle(timed_delivery("c-1", sent_at))
    return model.sent[0], anchor_events(logs)[0]


async def test_the_pace_is_read_from_created_at_and_sent_at_never_the_stages_clock() -> None:
    """GIVEN a deliberate conversation (questions 7-12 minutes apart) with its timestamps,
    WHEN the same turn is served by stages whose clocks are hours apart, THEN the payloads
    are byte for byte the same, and the choice names the gaps read."""

    def deliberate() -> tuple[HistoryTable, datetime]:
        table = HistoryTable()
        last = stamped(table, [420, 600, 480, 720, 540, 660])
        table.fold(4, SUMMARY)
        return table, last

    # Each stage serves a table of its own: the first would leave its anchor in a shared one.
    table, last = deliberate()
    sent = last + timedelta(minutes=8)
    early, event = await served_at(sent, table, sent)
    late, _ = await served_at(sent + timedelta(hours=5), deliberate()[0], sent)
    assert early == late
    assert (event["ttl_why"], event["pace_gaps"], event["pace_newest_gap_s"]) == (
        "expected_cost",
        6,
        480,
    )
    assert "1h" in event["ttls"]
    points = [b["cachePoint"] for b in early["converse"]["system"] if "cachePoint" in b]
    assert all(point["ttl"] in ("5m", "1h") for point in points)


async def test_without_sent_at_the_receive_time_ends_the_newest_gap() -> None:
    table = HistoryTable()
    last = stamped(table, [60, 90, 75])
    _, soon = await served_at(last + timedelta(seconds=80), table, None)
    _, later = await served_at(last + timedelta(minutes=50), table, None)
    assert (soon["pace_newest_gap_s"], later["pace_newest_gap_s"]) == (80, 3000)
