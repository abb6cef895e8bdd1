"""Part 10's replay (bench/load/answered.py, bench/parts/observed_*.py): the loop closed
through the stored answers, the model classes and deviations it runs under, the tokens the
stand-in counts, the pricing, the rows and the page."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from bench.load.answered import (
    CHANGED_SYSTEM_PROMPT,
    SYSTEM_PROMPT,
    answered_turns,
    billed_units,
    request_tokens,
)
from bench.load.model_classes import (
    BY_KEY,
    DEVIATION_CLASSES,
    baseline_settings,
    settings_for,
)
from bench.load.replay import replay_plans, replayed_conversations
from bench.parts import observed_bill
from bench.parts.observed_world import (
    BY_DEVIATION,
    DEVIATIONS,
    NONE,
    change_call,
    model_stage,
    plan_config,
    prefix_tokens_at,
)
from bench.reports.observed_bill import headline, markdown, section, targets
from localaws.bedrock_cache import chars_over_4, chars_per_token
from localaws.model_prefix import ModelPrefix
from worker.adapters.stored_bills import read_bill

SETTINGS = baseline_settings()
ALIGNED = replace(SETTINGS.plan_config, cache_aligned=True)
BASE = BY_KEY["1024/300"]


def conversation_and_times() -> tuple[Any, list[float]]:
    conversation = replayed_conversations(3)[2]
    times = [90.0 * turn for turn in range(1, conversation.turns + 1)]
    return conversation.at(times), times


def test_answers_stored_without_their_bill_leave_the_plans_as_the_replay_makes_them() -> None:
    """GIVEN an older writer (no ``model_usage``) THEN every turn's plan is part 8's."""
    conversation, times = conversation_and_times()
    stage = model_stage(BASE, NONE, conversation.turns)

    answered = list(
        answered_turns(conversation, ALIGNED, times, settings=SETTINGS, stage=stage, writer=None)
    )
    replayed = list(replay_plans(conversation, ALIGNED, times, settings=SETTINGS))

    assert [a.plan.view for a in answered] == [plan.view for plan in replayed]
    assert all(a.plan.page.usage == () for a in answered)
    assert all("model_usage" not in a.item for a in answered)


def test_each_page_carries_the_bills_of_its_answers_as_the_stage_parses_the_stored_items() -> None:
    """GIVEN answers stored with ``model_usage`` THEN turn t's page holds, newest first, the
    bill of each answer on it, as :func:`read_bill` reads that answer's item."""
    conversation, times = conversation_and_times()
    stage = model_stage(BASE, NONE, conversation.turns)

    answered = list(answered_turns(conversation, ALIGNED, times, settings=SETTINGS, stage=stage))

    for turn in answered[1:]:
        on_page = [m.seq for m in turn.plan.page.messages if m.role == "assistant"]
        assert [bill.seq for bill in turn.plan.page.usage] == on_page
        for bill in turn.plan.page.usage:
            stored = answered[bill.seq // 2 - 1].item["model_usage"]
            assert bill == read_bill(stored, bill.seq)
    assert answered[-1].plan.observed.calibration.samples > 0


def test_a_writer_without_a_zone_leaves_every_page_without_bills() -> None:
    """GIVEN the writer stamping ``answered_at`` without a zone THEN the stage's reader drops
    every bill whole: the pages carry none, as with an older writer."""
    conversation, times = conversation_and_times()
    deviation = BY_DEVIATION["no-zone"]
    stage = model_stage(BASE, deviation, conversation.turns)

    answered = list(answered_turns(conversation, ALIGNED, times, settings=SETTINGS, stage=stage,
                                   writer=deviation.writer))  # fmt: skip

    assert all("model_usage" in a.item for a in answered)
    assert all(a.plan.page.usage == () for a in answered)


def test_request_tokens_count_each_boundary_estimated_and_real_the_model_prefix_first() -> None:
    view = {
        "system": [{"text": "a" * 40}, {"cachePoint": {"type": "default"}}],
        "messages": [
            {"role": "user", "content": [{"text": "b" * 80}, {"cachePoint": {"type": "default"}},
                                         {"text": "c" * 8}]},
        ],
    }  # fmt: skip

    tokens = request_tokens(view, 5, chars_per_token(2))

    assert tokens.estimated == (0, 10, 30, 32)
    assert tokens.real == (5, 25, 65, 69)
    assert tokens.points == (1, 2)
    assert (tokens.boundary_of(30), tokens.boundary_of(31), tokens.boundary_of(0)) == (2, None, 0)
    assert (tokens.floor_of(31), tokens.floor_of(9), tokens.floor_of(99)) == (2, 0, 3)


def test_the_bill_is_priced_one_uncached_a_tenth_read_and_each_write_at_its_ttl() -> None:
    usage = {
        "inputTokens": 100,
        "cacheReadInputTokens": 1_000,
        "cacheWriteInputTokens": 300,
        "cacheDetails": [{"ttl": "1h", "inputTokens": 200}, {"ttl": "5m", "inputTokens": 100}],
    }
    assert billed_units(usage) == pytest.approx(100 + 100 + 400 + 125)
    assert billed_units({"inputTokens": 42}) == 42


# --- the model classes and the deviations --------------------------------------------------


@pytest.mark.parametrize("key", ["1024/300", "2048/2500", "4096/2500"])
def test_a_class_runs_the_stage_as_a_deployment_configures_it(key: str) -> None:
    """GIVEN a model class THEN the stage's MODEL_ID names a model of its minimum and
    MODEL_PREFIX_TOKENS is its prefix; without the prior only MODEL_ID."""
    model = BY_KEY[key]
    configured = plan_config(settings_for(model), aligned=True)
    assert (configured.min_tokens, configured.model_prefix_tokens) == (
        model.min_tokens,
        model.prefix_tokens,
    )
    assert configured.cache_aligned and configured.cache_ttl == "adaptive"
    assert plan_config(settings_for(model, prior=False), aligned=True).model_prefix_tokens == 0


@pytest.mark.parametrize("key", ["1024/300", "4096/2500"])
@pytest.mark.parametrize("deviation", ["none", "overcount", "undercount"])
def test_the_model_stage_of_a_class_sends_its_prefix_sized_under_the_deviations_tokenizer(
    key: str, deviation: str
) -> None:
    model, chosen = BY_KEY[key], BY_DEVIATION[deviation]
    stage = model_stage(model, chosen, 10)

    sent = ModelPrefix(stage.system_prompt, stage.tools).tokens(chosen.count_tokens)
    assert sent == prefix_tokens_at(model, chosen, 10, 1) == model.prefix_tokens
    assert bool(stage.tools) == (model.prefix_tokens >= 1_000)
    assert stage.config.min_prefix_tokens == model.min_tokens
    assert stage.own_cache_point


def test_the_system_prompt_changes_at_the_middle_call_of_the_conversation() -> None:
    """GIVEN the deviation of the model stage's system prompt THEN it is the changed one from
    the middle call on, and the stand-in says so on that call only."""
    deviation = BY_DEVIATION["prompt"]
    conversation, times = conversation_and_times()
    stage = model_stage(BASE, deviation, conversation.turns)

    answered = list(answered_turns(conversation, ALIGNED, times, settings=SETTINGS, stage=stage))

    middle = change_call(conversation.turns)
    assert [t.turn for t in answered if t.answer.system_prompt_changed] == [middle]
    assert stage.system_prompt == SYSTEM_PROMPT
    changed = chars_over_4(CHANGED_SYSTEM_PROMPT)
    assert prefix_tokens_at(BASE, deviation, conversation.turns, middle) == changed
    assert prefix_tokens_at(BASE, deviation, conversation.turns, middle - 1) == 300


def test_the_deviations_of_the_writer_and_the_clock_rebill_nothing_the_others_do() -> None:
    rebilling = {d.key for d in DEVIATIONS if d.rebills}
    assert rebilling == {"overcount", "overcount-short", "undercount", "downgrade", "prompt",
                         "evict", "per-checkpoint"}  # fmt: skip
    skews = {d.key: d.clock_skew for d in DEVIATIONS if d.clock_skew}
    assert skews == {"skew+2h": timedelta(hours=2), "skew-2h": timedelta(hours=-2),
                     "skew+5m": timedelta(minutes=5), "skew-5m": timedelta(minutes=-5)}  # fmt: skip
    assert not BY_DEVIATION["no-details"].writer.cache_details
    assert BY_DEVIATION["no-zone"].writer.local_time is not None


def test_the_sliding_view_depends_neither_on_the_class_nor_on_the_bill() -> None:
    """Why sliding is planned once per conversation and billed under each class."""
    conversation, times = conversation_and_times()
    views = []
    for key, writer in (("1024/300", None), ("4096/2500", BY_DEVIATION["none"].writer)):
        model = BY_KEY[key]
        settings = settings_for(model)
        turns = answered_turns(conversation, plan_config(settings, aligned=False), times,
                               settings=settings, stage=model_stage(model, NONE, 40),
                               writer=writer)  # fmt: skip
        views.append([t.plan.view for t in turns])
    assert views[0] == views[1]


def test_deviations_run_on_their_classes_only_the_documented_rules_first() -> None:
    selection = observed_bill.Selection(deviations=("skew-2h", "no-details"))
    for model in selection.models():
        keys = [d.key for d in selection.deviations_of(model)]
        assert keys == (["none", "skew-2h", "no-details"] if model.key in DEVIATION_CLASSES
                        else ["none"])  # fmt: skip


def test_the_per_checkpoint_minimum_is_also_measured_where_two_points_of_a_request_cache() -> None:
    """At 1,024 / 2,500 the model stage's own point caches, so the view's first one is a
    second checkpoint: the only class where the per-checkpoint reading bites."""
    selection = observed_bill.Selection(classes=("1024/2500", "2048/300"))
    keys = [[d.key for d in selection.deviations_of(m)] for m in selection.models()]
    assert keys == [["none", "per-checkpoint"], ["none"]]


def test_the_command_line_takes_classes_and_deviations_by_key() -> None:
    parse = observed_bill._keys(["1024/300", "4096/2500"])
    assert parse("4096/2500, 1024/300") == ("4096/2500", "1024/300")
    with pytest.raises(Exception, match="unknown: 8192/0"):
        parse("8192/0")


# --- one short conversation through every row, and the page -------------------------------

SELECTION = observed_bill.Selection(classes=("1024/300", "2048/300", "4096/2500"))


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    """The part's figures of one short conversation under every contender and deviation."""
    figures = observed_bill.Figures()
    figures.merge(observed_bill.replay(replayed_conversations(6)[5], SELECTION))
    return {
        "command": "test", "measured_at": "now", "cores": 2, "jobs": 1, "every": 1,
        "conversations": figures.conversations, "turns": figures.turns,
        "tree": {"commit": "abc", "changed": []}, "replay_seconds": 1.0,
        "replay_cpu_seconds": 1.0, "seconds": 1.0,
        **observed_bill.summary(figures, SELECTION),
    }  # fmt: skip


def test_each_class_has_its_rows_and_only_the_deviation_classes_their_deviations(
    document: dict[str, Any],
) -> None:
    classes = {c["key"]: c for c in document["classes"]}
    assert list(classes) == list(SELECTION.classes)
    for key, c in classes.items():
        contenders = set(c["contenders"])
        assert contenders == {*observed_bill.CONTENDERS, observed_bill.NEVER_EXPIRED}
        assert c["contenders"]["sliding"]["billed_share"] == pytest.approx(1.0)
        assert [r["key"] for r in c["deviations"]] == (
            [d.key for d in DEVIATIONS] if key in DEVIATION_CLASSES else []
        )
        assert set(c["calibration"]) == {"prior", "no prior"}
        assert "3" in c["calibration"]["prior"] and "10" in c["calibration"]["prior"]


def test_one_conversation_replayed_renders_the_page_with_every_target(
    document: dict[str, Any],
) -> None:
    """GIVEN one conversation under every contender and deviation THEN each contender's
    bill is a share of sliding's, and the page names every target with a verdict."""
    page = markdown(document)

    none = document["classes"][0]["deviations"][0]["contenders"]
    assert 0 < none["cache-aligned, bill"]["billed_share"] < 1
    for target, _, _ in targets(document):
        assert target in page
    assert "## 4,096 / 2,500 (Claude Opus 4.5): the bill" in page
    assert "## 2,048 / 300" not in page


def test_the_benchmarks_section_and_the_headline_give_a_row_per_class_and_per_deviation(
    document: dict[str, Any],
) -> None:
    lines = section(document, "benchmarks")

    assert lines[0] == "## 10. The bill, observed"
    assert "[`benchmarks/observed_bill.md`](benchmarks/observed_bill.md)" in lines[2]
    rows = [line for line in lines if line.startswith("| 4,096 / 2,500 |")]
    assert len(rows) == 1 and "`anthropic.claude-opus-4-5-20251101-v1:0`" in rows[0]
    for deviation in DEVIATIONS:
        assert any(line.startswith(f"| {deviation.name} |") for line in lines)
    printed = headline(document)
    assert any("after 3" in line and "after 10" in line for line in printed)
    assert sum(line.startswith("- ") for line in printed) == len(targets(document))
