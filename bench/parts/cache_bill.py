"""What a window shape costs under the prompt cache, summed over a replay's turns.

- :class:`Tally`: one contender's billed units, cache reads and writes, history tokens,
  fold-gap turns and re-anchors over its turns, and its bill per conversation;
- :func:`stepped_window`: the peer to beat (``docs/CACHE.md``, "The stepped peer"): the
  sliding window's start moved on to the next grid line of ``step`` tokens of history, then
  to the next question, never past the floor's start.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from worker.caching.bill_model import TurnCost
from worker.memory import HistoryMessage, Window, WindowLimits, estimate_tokens


@dataclass
class Tally:
    """What one contender billed and saw over its turns."""

    turns: int = 0
    billed: float = 0.0
    read: int = 0
    written: int = 0
    uncached: int = 0
    history: int = 0
    fold_gap_turns: int = 0
    reanchors: int = 0
    per_conversation: dict[str, float] = field(default_factory=dict)

    def add(
        self, conversation_id: str, cost: TurnCost, window: Window, *, gap: bool, reanchored: bool
    ) -> None:
        self.turns += 1
        self.billed += cost.billed
        self.read += cost.read
        self.written += cost.written
        self.uncached += cost.uncached
        self.history += window.estimated_tokens
        self.fold_gap_turns += gap
        self.reanchors += reanchored
        spent = self.per_conversation.get(conversation_id, 0.0)
        self.per_conversation[conversation_id] = spent + cost.billed

    def figures(self, base: Tally) -> dict[str, Any]:
        """Per turn, and as a share of ``base`` (the sliding window's tally)."""
        ratios = [
            billed / base.per_conversation[cid]
            for cid, billed in self.per_conversation.items()
            if base.per_conversation.get(cid)
        ]
        inputs = self.read + self.written + self.uncached
        return {
            "billed_per_turn": self.billed / self.turns,
            "billed_share": self.billed / base.billed,
            "read_share": self.read / max(1, inputs),
            "history_share": self.history / base.history,
            "reanchors_per_turn": self.reanchors / self.turns,
            "fold_gap_turns": self.fold_gap_turns,
            "above_own_sliding": sum(r > 1.0 for r in ratios) / max(1, len(ratios)),
            "above_own_sliding_count": sum(r > 1.0 for r in ratios),
            "worst_ratio": max(ratios, default=0.0),
        }


def stepped_window(
    history: Sequence[HistoryMessage],
    cumulative: Sequence[int],
    sliding: Window,
    limits: WindowLimits,
    step: int,
) -> Window:
    """The peer: the ``sliding`` window's start rounded up to the next grid line of
    ``step`` tokens, then to the next question; never past the floor's start.

    ``history`` is oldest first from seq 1; ``cumulative[s - 1]`` the estimated tokens
    (trimmed) of the messages before seq ``s``.
    """
    if sliding.floor_overrode_budget or not sliding.messages:
        return sliding
    start = sliding.messages[0].seq
    line = -(-cumulative[start - 1] // step) * step
    seq = bisect.bisect_left(cumulative, line, lo=start - 1) + 1
    while seq <= len(history) and history[seq - 1].role != "user":
        seq += 1
    seq = min(seq, floor_edge(history, limits))
    if seq == start:
        return sliding
    kept = sliding.messages[seq - start :]
    return Window(
        messages=kept,
        dropped=seq - 1,
        trimmed=sum(1 for m, o in zip(kept, history[seq - 1 :], strict=True) if m is not o),
        estimated_tokens=sum(estimate_tokens(m.content) for m in kept),
        floor_overrode_budget=False,
    )


def floor_edge(history: Sequence[HistoryMessage], limits: WindowLimits) -> int:
    """The seq the floor starts at: the newest ``floor_messages``, out to a question."""
    index = max(0, len(history) - limits.floor_messages)
    while index > 0 and history[index].role != "user":
        index -= 1
    return history[index].seq if history else 1
