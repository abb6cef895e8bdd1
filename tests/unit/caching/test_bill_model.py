"""The prompt-cache model, rule by rule, from a table of requests sent turn after turn."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from worker.caching.bill_model import CacheRules, PromptCache, TurnCost, price_turn

POINT: dict[str, Any] = {"cachePoint": {"type": "default"}}


def text(name: str, tokens: int) -> dict[str, Any]:
    """A text block of exactly ``tokens`` estimated tokens, told apart by ``name``."""
    return {"text": (name + "~" * (4 * tokens))[: 4 * tokens]}


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


@dataclass(frozen=True)
class Turn:
    at: float
    messages: list[dict[str, Any]]
    system: list[dict[str, Any]] = field(default_factory=list)


def priced(turns: list[Turn], rules: CacheRules) -> list[tuple[int, int, int]]:
    cache = PromptCache()
    costs = []
    for turn in turns:
        cost, cache = price_turn(cache, turn.system, turn.messages, at=turn.at, rules=rules)
        costs.append((cost.read, cost.written, cost.uncached))
    return costs


BIG = text("big", 1200)
SAME = [user(BIG, POINT, text("q", 10))]
LOOKBACK = [text(f"b{i}", 110) for i in range(32)]

CASES = {
    "a repeat request reads what the first wrote": (
        [Turn(0, SAME), Turn(60, SAME)],
        CacheRules(),
        [(0, 1200, 10), (1200, 0, 10)],
    ),
    "a changed first block misses, and writes again": (
        [Turn(0, SAME), Turn(60, [user(text("other", 1200), POINT, text("q", 10))])],
        CacheRules(),
        [(0, 1200, 10), (0, 1200, 10)],
    ),
    "the same text under another role is another prefix": (
        [Turn(0, SAME), Turn(60, [assistant(BIG, POINT), user(text("q", 10))])],
        CacheRules(),
        [(0, 1200, 10), (0, 1200, 10)],
    ),
    "where a message starts is part of the prefix": (
        [
            Turn(0, [user(text("a", 600), text("b", 600), POINT, text("q", 10))]),
            Turn(60, [user(text("a", 600)), assistant(text("b", 600), POINT), user(text("q", 10))]),
        ],
        CacheRules(),
        [(0, 1200, 10), (0, 1200, 10)],
    ),
    "under the minimum nothing is cached": (
        [Turn(0, [user(text("small", 800), POINT, text("q", 10))])] * 2,
        CacheRules(),
        [(0, 0, 810), (0, 0, 810)],
    ),
    "a 2,048-token minimum leaves a 1,200-token prefix uncached": (
        [Turn(0, SAME), Turn(60, SAME)],
        CacheRules(min_prefix_tokens=2048),
        [(0, 0, 1210), (0, 0, 1210)],
    ),
    "an entry expires 5 minutes after it was written": (
        [Turn(0, SAME), Turn(301, SAME)],
        CacheRules(),
        [(0, 1200, 10), (0, 1200, 10)],
    ),
    "a hit refreshes the entry's 5 minutes": (
        [Turn(0, SAME), Turn(290, SAME), Turn(580, SAME), Turn(881, SAME)],
        CacheRules(),
        [(0, 1200, 10), (1200, 0, 10), (1200, 0, 10), (0, 1200, 10)],
    ),
    "the 1-hour TTL outlives a long pause": (
        [Turn(0, SAME), Turn(3000, SAME)],
        CacheRules(ttl="1h"),
        [(0, 1200, 10), (1200, 0, 10)],
    ),
    "a hit is found up to 20 blocks before a point": (
        [
            Turn(0, [user(*LOOKBACK[:10], POINT, text("q", 10))]),
            Turn(60, [user(*LOOKBACK[:30], POINT, text("q", 10))]),
        ],
        CacheRules(),
        [(0, 1100, 10), (1100, 2200, 10)],
    ),
    "and not 21 blocks before it": (
        [
            Turn(0, [user(*LOOKBACK[:10], POINT, text("q", 10))]),
            Turn(60, [user(*LOOKBACK[:31], POINT, text("q", 10))]),
        ],
        CacheRules(),
        [(0, 1100, 10), (0, 3410, 10)],
    ),
    "a second point finds what the lookback of the last cannot": (
        [
            Turn(0, [user(*LOOKBACK[:10], POINT, text("q", 10))]),
            Turn(60, [user(*LOOKBACK[:10], POINT, *LOOKBACK[10:31], POINT, text("q", 10))]),
        ],
        CacheRules(),
        [(0, 1100, 10), (1100, 2310, 10)],
    ),
    "the model stage's system prompt comes first and is shared by changing views": (
        [Turn(0, [user(text("q1", 10))]), Turn(60, [user(text("q2", 10))])],
        CacheRules(system_prompt_tokens=1500, system_prompt_cache_point=True),
        [(0, 1500, 10), (1500, 0, 10)],
    ),
    "the view's summary point follows the model stage's prompt": (
        [
            Turn(0, [user(text("q1", 10))], system=[text("summary", 400), POINT]),
            Turn(60, [user(text("q2", 10))], system=[text("summary", 400), POINT]),
        ],
        CacheRules(system_prompt_tokens=700),
        [(0, 1100, 10), (1100, 0, 10)],
    ),
    "a summary under the minimum alone is never cached": (
        [Turn(0, [user(text("q1", 10))], system=[text("summary", 400), POINT])] * 2,
        CacheRules(system_prompt_tokens=300),
        [(0, 0, 710), (0, 0, 710)],
    ),
    "read per checkpoint, a second point 400 tokens on caches nothing more": (
        [Turn(0, [user(BIG, POINT, text("more", 400), POINT, text("q", 10))])],
        CacheRules(min_tokens_per_point=True),
        [(0, 1200, 410)],
    ),
    "read per prefix, it does": (
        [Turn(0, [user(BIG, POINT, text("more", 400), POINT, text("q", 10))])],
        CacheRules(),
        [(0, 1600, 10)],
    ),
}


@pytest.mark.parametrize(("turns", "rules", "expected"), CASES.values(), ids=CASES.keys())
def test_the_prompt_cache_model(
    turns: list[Turn], rules: CacheRules, expected: list[tuple[int, int, int]]
) -> None:
    assert priced(turns, rules) == expected


@pytest.mark.parametrize(
    ("ttl", "billed"),
    [("5m", 10 + 1200 * 1.25), ("1h", 10 + 1200 * 2.0)],
)
def test_written_tokens_bill_at_the_ttls_multiplier_and_read_ones_at_a_tenth(
    ttl: str, billed: float
) -> None:
    rules = CacheRules(ttl=ttl)  # type: ignore[arg-type]
    first, cache = price_turn(PromptCache(), [], SAME, at=0, rules=rules)
    second, _ = price_turn(cache, [], SAME, at=1, rules=rules)
    assert first == TurnCost(read=0, written=1200, uncached=10, billed=billed)
    assert second == TurnCost(read=1200, written=0, uncached=10, billed=10 + 120.0)
    assert second.input_tokens == first.input_tokens == 1210


def test_more_than_four_cache_points_are_refused() -> None:
    four = [user(*[block for i in range(4) for block in (text(f"p{i}", 300), POINT)])]
    price_turn(PromptCache(), [], four, at=0, rules=CacheRules())
    with pytest.raises(ValueError, match="at most 4 cache points"):
        price_turn(PromptCache(), [text("s", 10), POINT], four, at=0, rules=CacheRules())
    rules = CacheRules(system_prompt_tokens=10, system_prompt_cache_point=True)
    with pytest.raises(ValueError, match="at most 4 cache points"):
        price_turn(PromptCache(), [], four, at=0, rules=rules)


def test_expired_entries_are_dropped_from_the_state() -> None:
    _, cache = price_turn(PromptCache(), [], SAME, at=0, rules=CacheRules())
    assert len(cache.entries) == 1
    _, cache = price_turn(cache, [], [user(text("q", 10))], at=400, rules=CacheRules())
    assert cache.entries == ()


# --- a TTL per point ------------------------------------------------------------------------


def point(ttl: str) -> dict[str, Any]:
    return {"cachePoint": {"type": "default", "ttl": ttl}}


def two_points(first: str, second: str) -> list[dict[str, Any]]:
    return [user(text("s", 1200), point(first), text("h", 800), point(second), text("q", 10))]


def test_a_longer_ttl_after_a_shorter_one_is_refused() -> None:
    with pytest.raises(ValueError, match="longer TTL"):
        price_turn(PromptCache(), [], two_points("5m", "1h"), at=0, rules=CacheRules())


def test_written_tokens_cost_2x_up_to_the_last_1h_point_and_1_25x_after_it() -> None:
    cost, _ = price_turn(PromptCache(), [], two_points("1h", "5m"), at=0, rules=CacheRules())
    assert (cost.written, cost.uncached) == (2000, 10)
    assert cost.billed == pytest.approx(1200 * 2.0 + 800 * 1.25 + 10)


def test_each_entry_lives_its_own_ttl() -> None:
    """Ten minutes on, the 1h point's prefix is read and the 5m one's written again."""
    _, cache = price_turn(PromptCache(), [], two_points("1h", "5m"), at=0, rules=CacheRules())
    cost, _ = price_turn(cache, [], two_points("1h", "5m"), at=600, rules=CacheRules())
    assert (cost.read, cost.written) == (1200, 800)


def test_a_read_renews_an_entry_for_the_ttl_it_was_written_with_unless_lenient() -> None:
    """Written at 5m, read at 4 min by a request whose point says 1h: strictly the entry
    lives 5 more minutes (dead at 14 min); the lenient reading renews it for an hour."""
    rules = CacheRules()
    request = [user(text("s", 1200), point("5m"), text("q", 10))]
    longer = [user(text("s", 1200), point("1h"), text("r", 10))]
    for refresh, read_at_14 in (("strict", 0), ("lenient", 1200)):
        rules = CacheRules(refresh=refresh)  # type: ignore[arg-type]
        _, cache = price_turn(PromptCache(), [], request, at=0, rules=rules)
        cost, cache = price_turn(cache, [], longer, at=240, rules=rules)
        assert cost.read == 1200
        cost, _ = price_turn(cache, [], request, at=840, rules=rules)
        assert cost.read == read_at_14, refresh


def test_a_point_without_ttl_lives_the_rules_default() -> None:
    rules = CacheRules(ttl="1h")
    _, cache = price_turn(PromptCache(), [], SAME, at=0, rules=rules)
    cost, _ = price_turn(cache, [], SAME, at=1800, rules=rules)
    assert cost.read == 1200
