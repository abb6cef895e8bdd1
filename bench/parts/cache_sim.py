"""Throwaway simulation for issue 19: what each window shape costs under Bedrock's prompt cache.

Replays the benchmark workload's legal-matter conversations (:func:`bench.load.workload.
mixed_conversations`: 200 conversations, 20-1,000 messages each, the same text source)
turn by turn from their first message: turn ``t`` reads the stored history (one page of
``max_messages + 1`` messages, newest first, as the stage does), sends its prompt with
counsel's question ``2t - 1`` as the current message, then the question and its answer
are stored. The fold trigger is the stage's own (:func:`plan_compaction`); each request
lands 1-3 turns after it was sent (seeded at random), and the summary then changes
(300-600 tokens). Turns are spaced by a pause model (``--pauses``), so the cache's TTL
matters. Each prompt is priced with :mod:`worker.caching.bill_model`.

Contenders, all on the same conversations, fold schedule and clock:

- ``sliding``: today's window, cache point after the summary only;
- ``sliding+point``: today's window with the history's cache points;
- ``aligned``: the cache-aligned window, anchor stored between turns (one page read);
- ``aligned-derived``: the same, anchor replayed from the history (reads up to two pages);
- ``stepped``: the peer: the start moves on a grid of ``--step`` tokens of history (the
  start is the first question past the next grid line past the sliding start), with the
  history's cache points.

Run::

    .venv/bin/python -m bench.parts.cache_sim                      # the table at the defaults
    .venv/bin/python -m bench.parts.cache_sim --sweep              # headroom sweep (stored anchor)
    .venv/bin/python -m bench.parts.cache_sim --system-prompt 1500 --min-prefix 2048
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from bench.load.replay import START, pause
from bench.load.workload import TextSource, mixed_conversations
from bench.parts.cache_bill import HEADER, Tally, stepped_window
from bench.parts.derived_anchor import derived_aligned_window
from worker.caching.anchor import (
    DEFAULT_HEADROOM_MESSAGES,
    DEFAULT_HEADROOM_TOKENS,
    AlignedWindow,
    AnchorHeadroom,
    WindowAnchor,
    cache_aligned_window,
)
from worker.caching.bill_model import CacheRules, PromptCache, price_turn
from worker.memory import (
    FoldState,
    HistoryMessage,
    Window,
    WindowLimits,
    bound_history,
    estimate_tokens,
    fold_gap,
    plan_compaction,
    render_converse,
    trim_message,
)
from worker.memory.converse import previous_history_end
from worker.settings import Settings

CONTENDERS = ("sliding", "sliding+point", "aligned", "aligned-derived", "stepped")


@dataclass
class Conversation:
    """One conversation's replay state: the fold and each contender's cache and anchor."""

    messages: list[HistoryMessage]
    cumulative: list[int]  # tokens (trimmed) of messages before seq s, at index s - 1
    caches: dict[str, PromptCache] = field(default_factory=dict)
    anchor: WindowAnchor | None = None


def simulate(
    *,
    conversations: int,
    seed: int,
    headroom: AnchorHeadroom,
    rules: CacheRules,
    pauses: str,
    step: int,
    contenders: Sequence[str] = CONTENDERS,
) -> dict[str, Tally]:
    settings = Settings.at_defaults()
    limits, fold_limits = settings.window_limits, settings.fold_limits
    page_size = limits.max_messages + 1
    rng = random.Random(seed)
    built, _ = mixed_conversations(conversations, seed=seed)
    summaries = TextSource(random.Random(seed + 1))
    tallies = {name: Tally() for name in contenders}
    for _, messages in built:
        per_message = [
            estimate_tokens(trim_message(m.content, limits.message_max_tokens)) for m in messages
        ]
        cumulative = [0]
        for tokens in per_message:
            cumulative.append(cumulative[-1] + tokens)
        conversation = Conversation(messages, cumulative)
        state = FoldState()
        landings: dict[int, list[int]] = {}
        summary_of: dict[int, str] = {}
        at = 0.0
        for turn in range(1, len(messages) // 2 + 1):
            at += pause(rng, pauses)
            now = START + timedelta(seconds=at)
            folded = max([state.folded_through, *landings.pop(turn, [])])
            if folded != state.folded_through:
                summary = summary_of.setdefault(folded, summaries.cut(rng.randint(1_200, 2_400)))
                state = FoldState(folded, summary, state.requested_through, state.requested_at)
            history = messages[: 2 * (turn - 1)]
            current = messages[2 * turn - 2].content
            page = tuple(reversed(history[-page_size:]))
            plan = plan_compaction(
                page, state, fold_limits, older_unread=len(history) > len(page), now=now
            )
            if plan is not None:
                landings.setdefault(turn + rng.randint(1, 3), []).append(plan.through)
                state = FoldState(state.folded_through, state.summary, plan.through, now)
            sliding = bound_history(page, limits)
            if sliding.floor_needs_older:
                sliding = bound_history(reversed(history), limits)
            for name in contenders:
                window, outcome, wrote = _window(
                    name, conversation, history, page, state.folded_through, limits, headroom, step
                )
                cache_history = name != "sliding"
                view = render_converse(
                    window,
                    current,
                    state.summary,
                    cache_history=cache_history,
                    previous_history_end=previous_history_end(window) if cache_history else None,
                )
                cost, conversation.caches[name] = price_turn(
                    conversation.caches.get(name, PromptCache()),
                    view.system,
                    view.messages,
                    at=at,
                    rules=rules,
                )
                tally = tallies[name]
                tally.turns += 1
                tally.billed += cost.billed
                tally.read += cost.read
                tally.written += cost.written
                tally.uncached += cost.uncached
                tally.history_tokens += window.estimated_tokens
                tally.fold_gap_turns += fold_gap(window, state.folded_through) is not None
                tally.anchor_writes += wrote
                tally.fewer_messages.append(sliding.kept - window.kept)
                if outcome:
                    tally.outcomes[outcome] += 1
    return tallies


def _window(
    name: str,
    conversation: Conversation,
    history: list[HistoryMessage],
    page: tuple[HistoryMessage, ...],
    folded: int,
    limits: WindowLimits,
    headroom: AnchorHeadroom,
    step: int,
) -> tuple[Window, str, bool]:
    """The contender's window, its anchor outcome (aligned ones), and whether it wrote."""
    if name in ("sliding", "sliding+point"):
        window = bound_history(page, limits)
        if window.floor_needs_older:  # the stage reads further back
            window = bound_history(reversed(history), limits)
        return window, "", False
    if name == "stepped":
        return stepped_window(history, conversation.cumulative, limits, step), "", False
    result: AlignedWindow
    if name == "aligned":
        result = cache_aligned_window(
            page, limits, folded_through=folded, anchor=conversation.anchor, headroom=headroom
        )
        if result.window.floor_needs_older:
            result = cache_aligned_window(
                reversed(history),
                limits,
                folded_through=folded,
                anchor=conversation.anchor,
                headroom=headroom,
            )
        wrote = result.anchor_to_store is not None
        if wrote:
            conversation.anchor = result.anchor_to_store
    else:
        since = max(0, folded - 2 * limits.max_messages - 2)
        result = derived_aligned_window(
            history[since:], limits, folded_through=folded, headroom=headroom
        )
        wrote = False
    outcome = result.outcome + (f":{result.reason}" if result.reason else "")
    return result.window, outcome, wrote


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--headroom-tokens", type=int, default=DEFAULT_HEADROOM_TOKENS)
    parser.add_argument("--headroom-messages", type=int, default=DEFAULT_HEADROOM_MESSAGES)
    parser.add_argument("--system-prompt", type=int, default=0, help="model stage's tokens")
    parser.add_argument(
        "--system-prompt-point", action="store_true", help="model stage's own cache point"
    )
    parser.add_argument("--min-prefix", type=int, default=1024)
    parser.add_argument("--ttl", choices=("5m", "1h"), default="5m")
    parser.add_argument("--pauses", choices=("brisk", "typical", "slow"), default="brisk")
    parser.add_argument("--step", type=int, default=2000, help="the stepped peer's grid")
    parser.add_argument("--sweep", action="store_true", help="headroom grid, stored anchor")
    parser.add_argument("--sweep-tokens", default="500,750,1000,1500,2000")
    parser.add_argument("--sweep-messages", default="4,6,8,12")
    parser.add_argument(
        "--sweep-contender", choices=("aligned", "aligned-derived"), default="aligned"
    )
    args = parser.parse_args(argv)
    rules = CacheRules(
        min_prefix_tokens=args.min_prefix,
        ttl=args.ttl,
        system_prompt_tokens=args.system_prompt,
        system_prompt_cache_point=args.system_prompt_point,
    )
    common: dict[str, Any] = {
        "conversations": args.conversations,
        "seed": args.seed,
        "rules": rules,
        "pauses": args.pauses,
        "step": args.step,
    }
    started = time.perf_counter()
    if args.sweep:
        grid = [
            (int(tokens), int(messages))
            for tokens in args.sweep_tokens.split(",")
            for messages in args.sweep_messages.split(",")
        ]
        return _sweep(grid, args.sweep_contender, common)
    headroom = AnchorHeadroom(args.headroom_tokens, args.headroom_messages)
    tallies = simulate(headroom=headroom, **common)
    base = tallies["sliding"]
    print(
        f"{base.turns:,} turns over {args.conversations} conversations; headroom "
        f"{headroom.tokens} tokens / {headroom.messages} messages; {rules}; "
        f"pauses {args.pauses}; {time.perf_counter() - started:.0f} s\n"
    )
    print(HEADER)
    for name, tally in tallies.items():
        print(tally.line(name, base))
    for name in ("aligned", "aligned-derived"):
        print(f"\n{name} outcomes: {dict(sorted(tallies[name].outcomes.items()))}")
    return 0


def _sweep(grid: Sequence[tuple[int, int]], contender: str, common: dict[str, Any]) -> int:
    """Billed and history share of an anchored window for each headroom."""
    base = simulate(headroom=AnchorHeadroom(0, 0), contenders=("sliding",), **common)["sliding"]
    print(contender)
    print(
        "| headroom tokens | messages | billed % of sliding | history % of sliding "
        "| re-anchors / turn | anchor writes / turn |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for tokens, messages in grid:
        headroom = AnchorHeadroom(tokens, messages)
        tally = simulate(headroom=headroom, contenders=(contender,), **common)[contender]
        print(
            f"| {tokens} | {messages} | {tally.billed / base.billed:.1%} "
            f"| {tally.history_tokens / base.history_tokens:.1%} "
            f"| {tally.reanchors / tally.turns:.3f} | {tally.anchor_writes / tally.turns:.3f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
