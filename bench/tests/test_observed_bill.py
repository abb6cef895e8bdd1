"""Part 10's replay (bench/load/answered.py, bench/parts/observed_bill.py): the loop closed
through the stored answers, the tokens the stand-in counts, the pricing and the page."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from bench.load.answered import (
    CHANGED_SYSTEM_PROMPT,
    SYSTEM_PROMPT,
    answered_turns,
    billed_units,
    request_tokens,
)
from bench.load.replay import replay_plans, replayed_conversations
from bench.parts import observed_bill
from bench.reports.observed_bill import markdown, section, targets
from localaws.bedrock_cache import chars_per_token
from worker.adapters.stored_bills import read_bill
from worker.settings import Settings

SETTINGS = Settings.at_defaults()
ALIGNED = replace(SETTINGS.plan_config, cache_aligned=True)


def conversation_and_times() -> tuple[object, list[float]]:
    conversation = replayed_conversations(3)[2]
    times = [90.0 * turn for turn in range(1, conversation.turns + 1)]
    return conversation.at(times), times


def model_stage() -> object:
    return observed_bill.model_stage(observed_bill.BASELINE, 10)


def test_answers_stored_without_their_bill_leave_the_plans_as_the_replay_makes_them() -> None:
    """GIVEN an older writer (no ``model_usage``) THEN every turn's plan is part 8's."""
    conversation, times = conversation_and_times()

    answered = list(
        answered_turns(conversation, ALIGNED, times, settings=SETTINGS, stage=model_stage(),
                       bill_stored=False)
    )  # fmt: skip
    replayed = list(replay_plans(conversation, ALIGNED, times, settings=SETTINGS))

    assert [a.plan.view for a in answered] == [plan.view for plan in replayed]
    assert all(a.plan.page.usage == () for a in answered)
    assert all("model_usage" not in a.item for a in answered)


def test_each_page_carries_the_bills_of_its_answers_as_the_stage_parses_the_stored_items() -> None:
    """GIVEN answers stored with ``model_usage`` THEN turn t's page holds, newest first, the
    bill of each answer on it, as :func:`read_bill` reads that answer's item."""
    conversation, times = conversation_and_times()

    answered = list(
        answered_turns(conversation, ALIGNED, times, settings=SETTINGS, stage=model_stage())
    )

    for turn in answered[1:]:
        on_page = [m.seq for m in turn.plan.page.messages if m.role == "assistant"]
        assert [bill.seq for bill in turn.plan.page.usage] == on_page
        for bill in turn.plan.page.usage:
            stored = answered[bill.seq // 2 - 1].item["model_usage"]
            assert bill == read_bill(stored, bill.seq)
    assert answered[-1].plan.observed.calibration.samples > 0


def test_request_tokens_count_each_boundary_estimated_and_real_the_system_prompt_first() -> None:
    view = {
        "system": [{"text": "a" * 40}, {"cachePoint": {"type": "default"}}],
        "messages": [
            {"role": "user", "content": [{"text": "b" * 80}, {"cachePoint": {"type": "default"}},
                                         {"text": "c" * 8}]},
        ],
    }  # fmt: skip

    tokens = request_tokens(view, "s" * 10, chars_per_token(2))

    assert tokens.estimated == (0, 10, 30, 32)
    assert tokens.real == (5, 25, 65, 69)
    assert tokens.points == (1, 2)
    assert (tokens.boundary_of(30), tokens.boundary_of(31), tokens.boundary_of(0)) == (2, None, 0)


def test_the_bill_is_priced_one_uncached_a_tenth_read_and_each_write_at_its_ttl() -> None:
    usage = {
        "inputTokens": 100,
        "cacheReadInputTokens": 1_000,
        "cacheWriteInputTokens": 300,
        "cacheDetails": [{"ttl": "1h", "inputTokens": 200}, {"ttl": "5m", "inputTokens": 100}],
    }
    assert billed_units(usage) == pytest.approx(100 + 100 + 400 + 125)
    assert billed_units({"inputTokens": 42}) == 42


def test_the_system_prompt_changes_at_the_middle_call_of_the_conversation() -> None:
    """GIVEN the deviation of the model stage's system prompt THEN it is the changed one from
    the middle call on, and the stand-in says so on that call only."""
    deviation = next(d for d in observed_bill.DEVIATIONS if d.prompt_change)
    conversation, times = conversation_and_times()
    stage = observed_bill.model_stage(deviation, conversation.turns)

    answered = list(answered_turns(conversation, ALIGNED, times, settings=SETTINGS, stage=stage))

    middle = observed_bill.change_call(conversation.turns)
    assert [t.turn for t in answered if t.answer.system_prompt_changed] == [middle]
    prompts = {observed_bill.system_prompt_at(deviation, conversation.turns, t.turn)
               for t in answered[middle - 1:]}  # fmt: skip
    assert prompts == {CHANGED_SYSTEM_PROMPT}
    assert observed_bill.system_prompt_at(deviation, conversation.turns, 1) == SYSTEM_PROMPT


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    """The part's figures of one conversation under every contender and deviation."""
    figures = observed_bill.Figures()
    figures.merge(observed_bill.replay(replayed_conversations(2)[1], SETTINGS))
    return {
        "command": "test", "measured_at": "now", "cores": 2, "jobs": 1, "every": 1,
        "conversations": figures.conversations, "turns": figures.turns,
        "tree": {"commit": "abc", "changed": []}, "min_tokens": 1_024,
        "system_prompt_tokens": 294, "replay_seconds": 1.0, "replay_cpu_seconds": 1.0,
        "seconds": 1.0, **observed_bill.summary(figures),
    }  # fmt: skip


def test_one_conversation_replayed_renders_the_page_with_every_target(
    document: dict[str, Any],
) -> None:
    """GIVEN one conversation under every contender and deviation THEN each contender's
    bill is a share of sliding's, and the page names every target with a verdict."""
    page = markdown(document)

    none = document["deviations"][0]["contenders"]
    assert none["sliding"]["billed_share"] == pytest.approx(1.0)
    assert 0 < none["cache-aligned, bill"]["billed_share"] < 1
    for target, _, _ in targets(document):
        assert target in page


def test_the_benchmarks_section_gives_each_deviations_bills_and_links_the_page(
    document: dict[str, Any],
) -> None:
    """GIVEN the part's figures THEN its section of docs/BENCHMARKS.md has one row per
    deviation: sliding's billed units a turn, both cache-aligned bills as shares of it and
    the history the loop saw; the rest is on the page it links."""
    lines = section(document, "benchmarks")

    assert lines[0] == "## 10. The bill, observed"
    assert "[`benchmarks/observed_bill.md`](benchmarks/observed_bill.md)" in lines[2]
    rows = lines[lines.index("| --- | ---: | ---: | ---: | ---: |") + 1 :]
    assert len(rows) == len(observed_bill.DEVIATIONS)
    for row, deviation in zip(rows, document["deviations"], strict=True):
        c = deviation["contenders"]
        loop = c["cache-aligned, bill"]
        assert row == (
            f"| {deviation['name']} | {c['sliding']['billed_per_turn']:,.0f} "
            f"| {c['cache-aligned, no bill']['billed_share']:.1%} "
            f"| **{loop['billed_share']:.1%}** | {loop['history_share']:.1%} |"
        )
