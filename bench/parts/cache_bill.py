"""What a window shape costs under the prompt cache: shared by :mod:`bench.parts.cache_sim`
(the simulation that chose the anchor's headroom) and :mod:`bench.parts.model_bill` (the
real worker's payloads, priced).

- :class:`Tally`: one contender's billed units, cache reads and writes, history tokens,
  fold-gap turns, anchor outcomes and messages fewer than the sliding window, summed over
  its turns;
- :func:`stepped_window`: the peer to beat (``../shared/PROMPT-CACHE.md``): the sliding
  window's start moved on to the next grid line of ``step`` tokens of history, then to
  the next question, never past the floor's start;
- :class:`ViewCodec`: a Converse view (``system``, ``messages``) as a compact array of
  text ids, so that a run's tens of thousands of views can be kept and priced again under
  other rules without keeping their JSON.
"""

from __future__ import annotations

import bisect
from array import array
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from worker.caching.anchor import (
    AlignedWindow,
    AnchorHeadroom,
    WindowAnchor,
    cache_aligned_window,
)
from worker.caching.bill_model import TurnCost
from worker.memory import HistoryMessage, Window, WindowLimits, bound_history, estimate_tokens


@dataclass
class Tally:
    """What one contender billed and saw over all turns."""

    turns: int = 0
    billed: float = 0.0
    read: int = 0
    written: int = 0
    uncached: int = 0
    history_tokens: int = 0
    fold_gap_turns: int = 0
    anchor_writes: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    fewer_messages: list[int] = field(default_factory=list)

    @property
    def reanchors(self) -> int:
        return sum(v for k, v in self.outcomes.items() if k.startswith("reanchored"))

    @property
    def input_tokens(self) -> int:
        return self.read + self.written + self.uncached

    @property
    def read_share(self) -> float:
        return self.read / max(1, self.input_tokens)

    def add_cost(self, cost: TurnCost) -> None:
        self.turns += 1
        self.billed += cost.billed
        self.read += cost.read
        self.written += cost.written
        self.uncached += cost.uncached

    def fewer(self) -> tuple[int, int, int]:
        """Messages fewer than the sliding window: p50, p90, max."""
        fewer = sorted(self.fewer_messages) or [0]
        return fewer[len(fewer) // 2], fewer[int(len(fewer) * 0.9)], max(fewer)

    def line(self, name: str, base: Tally) -> str:
        p50, p90, most = self.fewer()
        return (
            f"| {name} | {self.billed / self.turns:,.0f} | {self.billed / base.billed:.1%} "
            f"| {self.read_share:.1%} | {self.history_tokens / self.turns:,.0f} "
            f"| {self.history_tokens / base.history_tokens:.1%} | {self.fold_gap_turns} "
            f"| {p50} / {p90} / {most} | {self.reanchors / self.turns:.3f} "
            f"| {self.anchor_writes / self.turns:.3f} |"
        )


HEADER = (
    "| contender | billed units / turn | % of sliding | input read from cache "
    "| history tokens / turn | % of sliding | fold-gap turns "
    "| messages fewer than sliding p50 / p90 / max | re-anchors / turn | anchor writes / turn |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
)


def stepped_window(
    history: Sequence[HistoryMessage], cumulative: Sequence[int], limits: WindowLimits, step: int
) -> Window:
    """The peer: the sliding start rounded up to the next grid line of ``step`` tokens,
    then to the next question; never past the floor's start.

    ``history`` is oldest first from seq 1; ``cumulative[s - 1]`` the estimated tokens
    (trimmed) of the messages before seq ``s``.
    """
    sliding = bound_history(reversed(history), limits)
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
    """The seq the floor (rule 3) starts at: the newest ``floor_messages``, out to a question."""
    index = max(0, len(history) - limits.floor_messages)
    while index > 0 and history[index].role != "user":
        index -= 1
    return history[index].seq if history else 1


# Codes of the compact view; text ids are >= 0.
_SYSTEM, _POINT, _USER, _ASSISTANT = -1, -2, -3, -4
_ROLE_CODE = {"user": _USER, "assistant": _ASSISTANT}
_CODE_ROLE = {_USER: "user", _ASSISTANT: "assistant"}


class ViewCodec:
    """Converse views as arrays of text ids, each distinct text kept once.

    ``encode(system, messages)`` takes the view as the payload's ``converse`` holds it
    (``{"text": …}`` and ``{"cachePoint": …}`` blocks); ``decode`` gives it back in the
    same shape, block for block and text for text.
    """

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._texts: list[str] = []

    def __len__(self) -> int:
        return len(self._texts)

    def _id(self, text: str) -> int:
        found = self._ids.get(text)
        if found is None:
            found = self._ids[text] = len(self._texts)
            self._texts.append(text)
        return found

    def _blocks(self, out: array[int], blocks: Sequence[Mapping[str, Any]]) -> None:
        for block in blocks:
            if "cachePoint" in block:
                out.append(_POINT)
            else:
                out.append(self._id(block["text"]))

    def encode(
        self, system: Sequence[Mapping[str, Any]], messages: Sequence[Mapping[str, Any]]
    ) -> array[int]:
        out = array("i", [_SYSTEM])
        self._blocks(out, system)
        for message in messages:
            out.append(_ROLE_CODE[message["role"]])
            self._blocks(out, message["content"])
        return out

    def decode(self, encoded: array[int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        system: list[dict[str, Any]] = []
        messages: list[dict[str, Any]] = []
        blocks = system
        for code in encoded:
            if code >= 0:
                blocks.append({"text": self._texts[code]})
            elif code == _POINT:
                blocks.append({"cachePoint": {"type": "default"}})
            elif code != _SYSTEM:
                blocks = []
                messages.append({"role": _CODE_ROLE[code], "content": blocks})
        return system, messages


def sliding_window(
    history: Sequence[HistoryMessage], page: Sequence[HistoryMessage], limits: WindowLimits
) -> Window:
    """The sliding window as the stage reads it: over the page (newest first), and over the
    whole history (oldest first) when its floor needs older messages than the page holds."""
    window = bound_history(page, limits)
    if window.floor_needs_older:
        window = bound_history(reversed(history), limits)
    return window


def aligned_window(
    history: Sequence[HistoryMessage],
    page: Sequence[HistoryMessage],
    limits: WindowLimits,
    *,
    folded: int,
    summary: str | None,
    anchor: WindowAnchor | None,
    headroom: AnchorHeadroom,
) -> AlignedWindow:
    """The cache-aligned window as the stage chooses it (``worker.turn.reading``): over the
    page read (newest first), and over the whole history (oldest first) when its floor needs
    older messages than the page holds."""
    result = cache_aligned_window(
        page, limits, folded_through=folded, anchor=anchor, headroom=headroom, summary=summary
    )
    if result.window.floor_needs_older:
        result = cache_aligned_window(
            reversed(history), limits, folded_through=folded, anchor=anchor,
            headroom=headroom, summary=summary,
        )  # fmt: skip
    return result
