"""The model bill's replay (bench/load/replay.py, bench/parts/cache_bill.py): the history the
stage reads, page by page; the plans it makes over it; the tallies and the stepped peer."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from bench.load.model_classes import CLASSES, baseline_settings
from bench.load.replay import (
    START,
    FoldTrack,
    ReplayedConversation,
    ReplayedHistory,
    ScriptedCompactor,
    finished,
    replay_plans,
    replayed_conversations,
)
from bench.parts import model_bill
from bench.parts.cache_bill import Tally, floor_edge, stepped_window
from worker.caching.bill_model import TurnCost
from worker.memory import HistoryMessage, Window

SETTINGS = baseline_settings()


def messages(count: int) -> tuple[HistoryMessage, ...]:
    return tuple(
        HistoryMessage(seq, "user" if seq % 2 else "assistant", f"{seq:04d} " + "x" * 400)
        for seq in range(1, count + 1)
    )


def test_the_replayed_history_reads_newest_first_a_page_at_a_time_the_state_item_first() -> None:
    """GIVEN 30 stored messages WHEN pages of 27 items are read THEN the first holds the
    ``state`` item and the newest 26 messages and says where the next starts; the next
    holds the 4 older ones and says nothing is older."""
    history = ReplayedHistory(messages(40), FoldTrack(ScriptedCompactor("c")), stored=30)

    first = finished(history.load_page("c", 27))
    older = finished(history.load_page("c", 27, older_than=first.older))

    assert [m.seq for m in first.messages] == list(range(30, 4, -1))
    assert first.older is not None
    assert [m.seq for m in older.messages] == [4, 3, 2, 1]
    assert older.older is None


def test_every_turn_is_planned_over_what_the_turns_before_it_stored_and_wrote() -> None:
    """GIVEN a workload conversation replayed in the cache-aligned mode THEN turn t reads the
    2t - 2 messages stored before it, the anchor the last plan that wrote one wrote, and a
    fold mark that only moves forward, landed 1-3 turns after its request."""
    conversation = replayed_conversations(3)[2]
    times = [60.0 * turn for turn in range(1, conversation.turns + 1)]
    config = replace(SETTINGS.plan_config, cache_aligned=True)

    plans = list(replay_plans(conversation.at(times), config, times, settings=SETTINGS))

    assert len(plans) == conversation.turns
    anchor, marks = None, []
    for turn, plan in enumerate(plans, start=1):
        newest = plan.page.messages[0].seq if plan.page.messages else 0
        assert newest == 2 * turn - 2
        assert plan.page.anchor == anchor
        anchor = plan.anchor_to_write or anchor
        marks.append(plan.page.state.folded_through)
    assert marks == sorted(marks)
    assert marks[-1] > 0


def test_the_tally_shares_are_of_the_sliding_bill_in_all_and_per_conversation() -> None:
    sliding, aligned = Tally(), Tally()
    window = Window(messages(4), 0, 0, 400, False)
    for cid, base, billed in (("a", 1_000.0, 400.0), ("b", 1_000.0, 1_200.0)):
        sliding.add(cid, TurnCost(0, 0, 1_000, base), window, gap=False, reanchored=False)
        aligned.add(cid, TurnCost(800, 0, 200, billed), window, gap=True, reanchored=True)

    figures = aligned.figures(sliding)

    assert figures["billed_share"] == pytest.approx(0.8)
    assert figures["read_share"] == pytest.approx(0.8)
    assert (figures["above_own_sliding"], figures["above_own_sliding_count"]) == (0.5, 1)
    assert figures["worst_ratio"] == pytest.approx(1.2)
    assert (figures["fold_gap_turns"], figures["reanchors_per_turn"]) == (2, 1.0)


def test_the_stepped_peer_starts_on_a_question_on_its_grid_never_past_the_floor() -> None:
    """GIVEN 40 messages of 101 tokens and the sliding window over the newest 24 WHEN the
    start moves to the next 2,000-token grid line THEN it stops on a question, at most at
    the floor's start."""
    history = messages(40)
    cumulative = [101 * seq for seq in range(len(history) + 1)]
    sliding = Window(history[16:], 16, 0, 24 * 101, False)
    limits = SETTINGS.window_limits

    stepped = stepped_window(history, cumulative, sliding, limits, 2_000)

    start = stepped.messages[0]
    assert start.role == "user"
    assert 17 < start.seq <= floor_edge(history, limits)
    assert stepped.messages == history[start.seq - 1 :]


def test_each_question_and_answer_is_stamped_with_its_turns_time_in_whole_seconds() -> None:
    conversation = ReplayedConversation("c", messages(4))
    stamped = conversation.at([10.0, 70.5])
    assert [m.content for m in stamped.messages] == [m.content for m in conversation.messages]
    assert [m.created_at for m in stamped.messages] == [
        START + timedelta(seconds=s) for s in (10, 10, 70, 70)
    ]


def test_each_model_class_is_a_case_priced_with_its_rules_and_planned_as_deployed() -> None:
    """GIVEN part 8's cases THEN each model class is one, its rules the class's minimum and
    model stage prefix (with its point), its plans the stage's under MODEL_ID and
    MODEL_PREFIX_TOKENS."""
    classes = [case for case in model_bill.CASES if case.model is not None]
    assert [c.model.key for c in classes] == [m.key for m in CLASSES]
    for case in classes:
        assert case.pauses == "mixed" and case.rules.system_prompt_cache_point
        assert (case.rules.min_prefix_tokens, case.rules.system_prompt_tokens) == (
            case.model.min_tokens,
            case.model.prefix_tokens,
        )
        config = model_bill.plan_config(SETTINGS, case, "cache-aligned")
        planned = (config.min_tokens, config.model_prefix_tokens, config.cache_aligned)
        assert planned == (case.model.min_tokens, case.model.prefix_tokens, True)
