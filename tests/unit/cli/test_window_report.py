"""``worker window``'s report over an in-memory history table: what it says of the window,
the anchor and the cache, that it only reads, and that content appears only when asked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import partial

from localaws.bedrock_cache import STAND_IN_MODEL_ID
from tests.conftest import settings as make_settings
from tests.unit.fakes import HistoryTable
from worker.caching.anchor import WindowAnchor
from worker.cli.window_report import describe_next_turn
from worker.memory import HistoryMessage
from worker.planning import plan_turn
from worker.turn.reading import read_turn

ALIGNED = make_settings(history_window_mode="cache-aligned", model_id=STAND_IN_MODEL_ID)
SECRET = "PRIVILEGED settlement figure"
SUMMARY = f"{SECRET}: the matter so far, at length. " * 40


def conversation(exchanges: int, *, chars: int = 400) -> HistoryTable:
    table = HistoryTable()
    for i in range(exchanges):
        table.append(("user", f"{SECRET} q{i} ".ljust(chars, "q")))
        table.append(("assistant", f"{SECRET} a{i} ".ljust(chars, "a")))
    return table


def row(lines: list[str], seq: int) -> str:
    [found] = [line for line in lines if line.split()[:1] == [str(seq)]]
    return found


async def test_the_report_names_the_window_the_fold_and_a_kept_anchor_without_content() -> None:
    table = conversation(30)  # seqs 1-60, 100 tokens each
    table.fold(50, SUMMARY)
    table.anchor = WindowAnchor(seq=41, folded_through=50)
    lines = await describe_next_turn(table, "matter-1", ALIGNED)
    text = "\n".join(lines)
    assert SECRET not in text and "q1" not in text
    assert "history: newest seq 60; fold mark 50 (summary 600 tokens); read in 1 Query" in text
    assert "anchor: stored seq 41 (fold mark 50); this turn would keep it (writes nothing)" in text
    assert "window: 20 kept, seq 41-60; 2,000 estimated tokens of 4,000, 20 messages of 25" in text
    assert "dropped: 40 older than the window (seq 1-40)" in text
    assert "fold gap: none" in text
    assert row(lines, 41).split() == ["41", "user", "100"]
    # The previous prompt (the same anchor, one exchange shorter) is a prefix of this one:
    # the model reads it all and writes only the newest exchange.
    [cache] = [line for line in lines if line.startswith("cache model")]
    assert "the previous turn's prompt rebuilt and cached 60 s before" in cache
    assert "written 200," in cache
    assert table.writes == [] and table.anchor == WindowAnchor(41, 50)


async def test_the_sliding_report_shows_the_cache_miss_of_a_moving_start() -> None:
    table = conversation(30)
    table.fold(50, SUMMARY)
    lines = await describe_next_turn(table, "matter-1", make_settings())
    text = "\n".join(lines)
    assert "anchor:" not in text
    assert "window: 24 kept, seq 37-60" in text
    [cache] = [line for line in lines if line.startswith("cache model")]
    # The previous window started two messages earlier, so no history prefix repeats; and
    # the summary alone (600 tokens) is under the 1,024-token minimum: nothing is read.
    assert "read 0, written 0," in cache


async def test_a_re_anchor_a_fold_gap_trims_and_left_out_messages_are_each_named() -> None:
    table = HistoryTable()
    table.append(("assistant", "Welcome."))  # a greeting before the first question
    for i in range(14):
        table.append(("user", f"q{i} " + "x" * 8000), ("assistant", f"a{i} " + "y" * 400))
    table.fold(2, SUMMARY)
    table.anchor = WindowAnchor(seq=2, folded_through=0)
    lines = await describe_next_turn(table, "matter-1", ALIGNED)
    text = "\n".join(lines)
    assert "this turn would fall back to the sliding window" in text
    assert "fold gap: " in text and "held by neither window nor fold" in text
    assert row(lines, 28).endswith("yes (2,001 stored)")  # the newest question, trimmed
    assert row(lines, 29).split() == ["29", "assistant", "101"]
    greeted = HistoryTable()
    greeted.append(("assistant", "Welcome."), ("user", "q"), ("assistant", "a"))
    left = await describe_next_turn(greeted, "matter-2", ALIGNED)
    assert "left out of the view: 1: seq 1 (leading_answer)" in left
    assert (
        "anchor: none stored; this turn would re-anchor (first_turn) at seq 1 (fold mark 0); "
        "would store it" in left
    )
    assert greeted.writes == []


async def test_content_and_the_summary_are_printed_only_when_asked() -> None:
    table = conversation(3)
    table.fold(2, SUMMARY)
    lines = await describe_next_turn(table, "matter-1", ALIGNED, show_content=True)
    text = "\n".join(lines)
    assert f"        | {SECRET} q2 " in text
    assert "summary:" in text


async def test_the_report_names_the_cache_lifetimes_the_next_turn_would_choose_and_why() -> None:
    """Questions 10 minutes apart, the next one asked 8 minutes after the last: a steady
    turn of a deliberate conversation, so the points get 1h; the line names the gaps read
    and the chances (no content), and the summary shown with its snapshot."""
    table = HistoryTable()
    at = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    for i in range(8):
        seq = len(table.messages) + 1
        table.messages[seq] = HistoryMessage(seq, "user", f"{SECRET} q{i} " * 20, created_at=at)
        table.messages[seq + 1] = HistoryMessage(seq + 1, "assistant", f"{SECRET} a{i} " * 30)
        at += timedelta(minutes=10)
    table.fold(4, SUMMARY)
    first = await describe_next_turn(table, "matter-1", ALIGNED, now=at)
    assert not any("would keep it" in line for line in first)
    # Store what the first turn would, then ask again: the anchor is kept.
    read = await read_turn(
        table,
        "matter-1",
        page_size=ALIGNED.history_page_size,
        plan=partial(plan_turn, message="next", sent_at=None, config=ALIGNED.plan_config),
    )
    table.anchor = read.aligned.anchor if read.aligned else None
    lines = await describe_next_turn(table, "matter-1", ALIGNED, now=at - timedelta(minutes=2))
    text = "\n".join(lines)
    assert SECRET not in text
    [ttl] = [line for line in lines if line.startswith("cache lifetimes:")]
    assert ttl.startswith("cache lifetimes: 1h, 1h (the expected cost under the pace; 8 gaps")
    assert "the newest 8.0 min if asked now" in ttl and "P(gap < 1 h) 0.94" in ttl
    [shown] = [line for line in lines if line.startswith("summary shown:")]
    assert shown == "summary shown: fold mark 4; the newest; snapshot stored with the anchor"
