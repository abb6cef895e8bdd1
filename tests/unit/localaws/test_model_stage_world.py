"""The stand-in's wider world: Bedrock's per-checkpoint minimum, the model stage's own prefix
of any size (tools and system prompt), its clock skewed from the producers', and its writer
on an old botocore (no ``cacheDetails``) or stamping ``answered_at`` without a zone.

Each rule on a request worked by hand; with chars/4, ``words(n)`` is exactly ``n`` tokens.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from localaws.bedrock_cache import (
    CacheConfig,
    PromptCache,
    block_tokens,
    chars_over_4,
    chars_per_token,
)
from localaws.model_prefix import HOUSE_PROMPT, sized_prefix, tool_spec
from localaws.model_stage import BillWriter, ModelStage, answer_item
from worker.adapters.stored_bills import read_bill
from worker.caching.bills import ModelUsage
from worker.ports import StoredDefect

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def words(tokens: int, seed: str = "clause") -> str:
    return ((seed + " ") * (4 * tokens))[: 4 * tokens]


def text(tokens: int, seed: str = "clause") -> dict[str, Any]:
    return {"text": words(tokens, seed)}


def point() -> dict[str, Any]:
    return {"cachePoint": {"type": "default"}}


def cached(usage: dict[str, Any]) -> tuple[int, int, int]:
    """(read, written, uncached)."""
    return usage["cacheReadInputTokens"], usage["cacheWriteInputTokens"], usage["inputTokens"]


# --- Bedrock's per-checkpoint minimum ---------------------------------------------------------

#: Points after 1,500, 2,200 and 2,600 tokens, then a 50-token question; minimum 1,024.
CHECKPOINTS = [
    text(1_500, "a"),
    point(),
    text(700, "b"),
    point(),
    text(400, "c"),
    point(),
    text(50, "q"),
]


def test_by_default_every_point_whose_whole_prefix_reaches_the_minimum_caches() -> None:
    usage = PromptCache().converse(system=[], messages=[{"role": "user", "content": CHECKPOINTS}],
                                   at=0).usage  # fmt: skip
    assert cached(usage) == (0, 2_600, 50)


def test_per_checkpoint_each_point_needs_the_minimum_more_than_the_last_point_that_caches() -> None:
    """1,500 caches (the first checkpoint); 2,200 holds only 700 more, so it is no
    checkpoint (the k-th-times-the-minimum reading, 2,048, would have cached it); 2,600 holds
    1,100 more than 1,500 and caches. Written: up to 2,600; read on the next call: 2,600."""
    cache = PromptCache(CacheConfig(min_per_checkpoint=True))
    messages = [{"role": "user", "content": CHECKPOINTS}]
    assert cached(cache.converse(system=[], messages=messages, at=0).usage) == (0, 2_600, 50)
    shorter = [{"role": "user", "content": [*CHECKPOINTS[:4], text(50, "q")]}]
    # The same request cut after 2,200: that point is no checkpoint, 1,500 is read.
    assert cached(cache.converse(system=[], messages=shorter, at=10).usage) == (1_500, 0, 750)


def test_per_checkpoint_a_point_below_the_minimum_is_no_checkpoint_and_does_not_count() -> None:
    """500 does not cache, so 1,100 is the first checkpoint (it holds the minimum from the
    start, not from 500); 1,110 is only 10 more and does not cache."""
    blocks = [text(500, "a"), point(), text(600, "b"), point(), text(10, "s"), point(),
              text(50, "q")]  # fmt: skip
    usage = (
        PromptCache(CacheConfig(min_per_checkpoint=True))
        .converse(system=[], messages=[{"role": "user", "content": blocks}], at=0)
        .usage
    )
    assert cached(usage) == (0, 1_100, 60)


# --- the model stage's own prefix, of any size -------------------------------------------------


@pytest.mark.parametrize("count", [chars_over_4, chars_per_token(4.68), chars_per_token(3.4)],
                         ids=["chars/4", "chars/4.68", "chars/3.4"])  # fmt: skip
@pytest.mark.parametrize(("tokens", "tool_tokens"), [(300, 0), (2_500, 0), (2_500, 1_500), (61, 0)])
def test_a_sized_prefix_holds_exactly_its_tokens_under_the_stand_ins_tokenizer(
    count: Any, tokens: int, tool_tokens: int
) -> None:
    prefix = sized_prefix(tokens, count, tool_tokens=tool_tokens)
    assert prefix.tokens(count) == tokens
    tools = sum(block_tokens(t, count) for t in prefix.tools)
    assert tools <= tool_tokens and (tool_tokens == 0) == (not prefix.tools)
    assert count(prefix.system_prompt) == tokens - tools


def test_a_sized_prefix_opens_with_the_house_prompt_and_is_cut_from_it_when_smaller() -> None:
    assert sized_prefix(2_500).system_prompt.startswith(HOUSE_PROMPT)
    assert sized_prefix(20).system_prompt == HOUSE_PROMPT[:80]
    with pytest.raises(ValueError, match="tool tokens"):
        sized_prefix(100, tool_tokens=101)


def test_the_model_stage_sends_its_tools_then_its_system_prompt_before_the_view() -> None:
    """A 1,100-token prefix (tools first) with the stage's own point: written on the first
    call, read on the next; a changed tool is a miss for everything after it."""
    prefix = sized_prefix(1_100, tool_tokens=400)
    payload = {"conversation_id": "m", "converse": {
        "system": [], "messages": [{"role": "user", "content": [text(50, "q")]}]}}  # fmt: skip

    def stage(tools: tuple[dict[str, Any], ...]) -> ModelStage:
        return ModelStage(system_prompt=prefix.system_prompt, tools=tools, own_cache_point=True)

    same = stage(prefix.tools)
    assert cached(same.answer(payload, at=T0).usage) == (0, 1_100, 50)
    assert cached(same.answer(payload, at=T0 + timedelta(minutes=1)).usage) == (1_100, 0, 50)
    changed = (tool_spec("quote_clause", "Another description."), *prefix.tools[1:])
    other = stage(changed)
    other.answer(payload, at=T0)
    other.tools = prefix.tools
    assert cached(other.answer(payload, at=T0 + timedelta(minutes=1)).usage)[0] == 0


# --- the model stage's clock, and its writer -----------------------------------------------


def answered(stage: ModelStage, at: datetime) -> tuple[dict[str, Any], Any]:
    payload = {"conversation_id": "m", "command_id": "c-1", "converse": {
        "system": [text(1_100), point()],
        "messages": [{"role": "user", "content": [text(50, "q")]}]}}  # fmt: skip
    return payload, stage.answer(payload, at=at)


@pytest.mark.parametrize("skew", [timedelta(hours=-2), timedelta(minutes=5)], ids=["-2h", "+5m"])
def test_a_skewed_clock_stamps_answered_at_off_while_the_cache_runs_on_true_time(
    skew: timedelta,
) -> None:
    stage = ModelStage(clock_skew=skew)
    payload, first = answered(stage, T0)
    assert (first.answered_at, first.stamped_at) == (T0, T0 + skew)
    item = answer_item(payload, first, seq=2)
    stamped = (T0 + skew).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert item["model_usage"]["M"]["answered_at"] == {"S": stamped}
    assert item["created_at"] == {"S": stamped}
    # 4 minutes on by true time: the entry is alive whatever the clock says.
    _, later = answered(stage, T0 + timedelta(minutes=4))
    assert later.usage["cacheReadInputTokens"] > 0


def test_a_writer_on_an_old_botocore_stores_the_bill_without_cache_details() -> None:
    """The split of the writes is unknown; the rest of the bill is as returned, and the
    stage's reader takes it."""
    payload, answer = answered(ModelStage(), T0)
    assert answer.usage["cacheDetails"] == [{"ttl": "5m", "inputTokens": 1_100 + 61}]
    item = answer_item(payload, answer, seq=2, writer=BillWriter(cache_details=False))
    stored = item["model_usage"]["M"]
    assert "cacheDetails" not in stored
    assert stored["cacheWriteInputTokens"] == {"N": "1161"}
    bill = read_bill(item["model_usage"], 2)
    assert isinstance(bill, ModelUsage) and bill.write_tokens == 1_161


def test_a_writer_stamping_local_time_without_a_zone_gets_its_bill_dropped_whole() -> None:
    payload, answer = answered(ModelStage(), T0 + timedelta(seconds=42.9))
    item = answer_item(payload, answer, seq=2, writer=BillWriter(local_time=timedelta(hours=1)))
    assert item["model_usage"]["M"]["answered_at"] == {"S": "2026-11-30T10:00:42"}
    assert item["created_at"] == {"S": "2026-11-30T09:00:42Z"}
    dropped = read_bill(item["model_usage"], 2)
    assert isinstance(dropped, StoredDefect)
    assert dropped.attribute == "model_usage.answered_at"


def test_for_measuring_an_entry_can_be_made_to_live_for_ever_and_never_be_evicted() -> None:
    """Not Bedrock: the bound a benchmark compares with (the same windows, nothing expired)."""
    system = [text(1_100), point()]
    question = {"role": "user", "content": [text(50, "q")]}
    cache = PromptCache(CacheConfig(never_expire=True, evict_share=1.0))
    cache.converse(system=system, messages=[question], at=0)
    later = cache.converse(system=system, messages=[question], at=30 * 86_400)
    assert cached(later.usage) == (1_100, 0, 50) and not later.evicted
