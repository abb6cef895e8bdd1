"""Issue 24's study pipeline: the mixed pace population is a draw per conversation, and every
view the contenders price keeps Converse's cache-point rules (TTLs never increasing, at most 3
points; the full Converse check runs on the worker's payloads in the integration tests)."""

from __future__ import annotations

from collections import Counter

from bench.load.replay import pace_profile, replayed_conversations, turn_times
from bench.parts.cache_ttl_study import (
    BASELINE_RULES,
    CONTENDERS,
    FAMILY,
    SEED,
    _ttls_for,
    conversation_turns,
)
from worker.caching.bill_model import PromptCache, price_turn
from worker.caching.lifetimes import ttl_order_is_legal
from worker.memory.converse import with_cache_ttls
from worker.settings import Settings


def test_the_mixed_population_draws_each_profile_near_its_share_and_sticks_to_it() -> None:
    drawn = Counter(pace_profile(f"c-{i}", "mixed") for i in range(4000))
    shares = {profile: count / 4000 for profile, count in drawn.items()}
    assert abs(shares["sessions"] - 0.4) < 0.03 and abs(shares["cold"] - 0.1) < 0.02
    assert pace_profile("c-1", "mixed") == pace_profile("c-1", "mixed")
    assert pace_profile("c-1", "cold") == "cold"
    assert turn_times("c-1", 5, "mixed") == turn_times("c-1", 5, "mixed")


def test_every_contenders_view_keeps_the_cache_point_rules() -> None:
    settings = Settings.at_defaults()
    for conversation in replayed_conversations(200, seed=SEED)[:3]:
        turns = conversation_turns(
            conversation,
            limits=settings.window_limits,
            fold=settings.fold_limits,
            headroom=settings.anchor_headroom,
        )
        times = turn_times(conversation.conversation_id, conversation.turns, "mixed", seed=SEED)
        for contender in CONTENDERS:
            family, cache = FAMILY[contender], PromptCache()
            for index, turn in enumerate(turns):
                ttls = _ttls_for(contender, turn, family, times=times, index=index,
                                 rules=BASELINE_RULES, cache=cache)  # fmt: skip
                view = turn.views[family]
                if ttls is not None:
                    view = with_cache_ttls(view, ttls)
                blocks = [*view.system, *(b for m in view.messages for b in m["content"])]
                points = [b["cachePoint"].get("ttl", "5m") for b in blocks if "cachePoint" in b]
                assert len(points) <= 3 and ttl_order_is_legal(points), (contender, index)
                assert all(m["content"][0].get("text") for m in view.messages)
                _, cache = price_turn(cache, view.system, view.messages, at=times[index],
                                      rules=BASELINE_RULES)  # fmt: skip
