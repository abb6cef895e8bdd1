"""The cache-aligned window: a window whose start stays put between fold landings.

``docs/CONTRACT.md``, "The cache-aligned window". Rules 1-3 of the window (trim,
never the current message, floor) and the budget's limits hold; rule 4's "extend as far
back as fits" is replaced by an anchor:

- ``S_must`` is the older of ``folded_through + 1`` and the floor's start, moved out to
  the start of its exchange. The window always reaches back to it: nothing the fold has
  not absorbed is left out, and the floor holds.
- The window is ``[A, newest]`` for the anchor ``A`` chosen at the last re-anchoring. It
  is kept while ``[A, newest]`` fits the budget (tokens after trimming, and messages)
  and reaches back to ``S_must`` computed with the summary in force.
- The summary in force is fold-lagged: the snapshot taken when the anchor was chosen
  (:class:`SummarySnapshot`), kept across fold landings while the anchor is; the prompt
  shows it, and ``S_must`` is computed from its mark, so everything after that mark is in
  the window (``A <= F_snapshot + 1``). Without a snapshot (a summary too large to store,
  :data:`SNAPSHOT_MAX_BYTES`, or a ``state`` item whose anchor carries none) a fold landing
  re-anchors.
- Otherwise the window re-anchors: ``A = S_must`` computed with the newest summary,
  extended backwards in whole exchanges while the window stays within the budget less
  the headroom, so that it can grow for several turns before it must move again; the
  newest summary and its mark become the snapshot.
- If ``[S_must, newest]`` alone exceeds the budget, the turn uses the sliding window
  (:func:`bound_history`) and says so (``outcome == "fallback"``).

An anchor is the start of an exchange: a user message, or seq 1 when the conversation
opens with assistant messages (an exchange of their own, as in rule 4).

The input is newest first and read lazily, as :func:`bound_history` reads it: at most
the floor's run or ``max_messages + 1`` messages, so one page suffices. An anchor older
than the input cannot fit the message cap (the page holds ``max_messages + 1``), so it
counts as an overflow. Pure: no I/O, no logging; the caller stores the anchor and logs
the outcome.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import Literal

from worker.memory.history_window import HistoryMessage, Window, WindowLimits, bound_history
from worker.memory.tokens import estimate_tokens
from worker.memory.trim import trim_message

AnchorOutcome = Literal["kept", "reanchored", "fallback"]
#: Why a window re-anchored: no anchor was given (``first_turn``), the fold mark moved
#: since it was chosen and no snapshot holds the summary it was chosen under, ``[A,
#: newest]`` no longer fits the budget (or ``A`` lies beyond the input read, or the
#: snapshot's unfolded tail alone is over the budget), or the anchor cannot be this
#: history's (not an exchange start, not in it, newer than ``S_must``), or every cache entry
#: is dead at the command's ``sent_at`` (``cold``: the turn writes its whole prompt anyway).
ReanchorReason = Literal["first_turn", "fold_moved", "overflow", "invalid", "cold"]


#: The headroom's defaults (``HISTORY_WINDOW_ANCHOR_HEADROOM_TOKENS`` / ``_MESSAGES``). The
#: headroom trades a re-anchor's cache write against the window's length: more room means
#: fewer re-anchors but a shorter window at each, so less history seen. Of the headrooms
#: measured (the fold-lagged window, cache lifetimes chosen per turn), these bill the least
#: while the history seen keeps a margin over the goal of at least 80% of the sliding
#: window's; the table is in docs/benchmarks/defaults.md ("The anchor headroom"). Absolute,
#: not a share of the budget: the headroom is how many turns of growth the window has
#: before it overflows, and a turn's growth does not scale with the budget.
DEFAULT_HEADROOM_TOKENS = 1500
DEFAULT_HEADROOM_MESSAGES = 8


#: The largest summary snapshotted beside the anchor, in UTF-8 bytes (64 KiB, about 16,000
#: estimated tokens: four times the default window's whole budget). The snapshot lives on
#: the ``state`` item, which also holds the compactor's ``fold_summary``, and a DynamoDB
#: item holds at most 400 KB: with the snapshot bounded, the two summaries fit as long as
#: the compactor's stays under ~330 KB. A larger summary is not snapshotted; that
#: conversation re-anchors when the fold moves (``fold_moved``).
SNAPSHOT_MAX_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class SummarySnapshot:
    """A fold summary and the fold mark it covers (``summary`` None: no summary yet)."""

    summary: str | None
    folded_through: int

    @property
    def storable(self) -> bool:
        """Whether it is small enough to snapshot (:data:`SNAPSHOT_MAX_BYTES`)."""
        text = self.summary or ""
        # Cheap bound first: a code point is at most 4 UTF-8 bytes.
        if 4 * len(text) <= SNAPSHOT_MAX_BYTES:
            return True
        return len(text.encode("utf-8", "surrogatepass")) <= SNAPSHOT_MAX_BYTES


@dataclass(frozen=True, slots=True)
class AnchorHeadroom:
    """Room left below the budget when the window re-anchors: what it may grow by, in
    tokens and in messages, before it overflows and must move again. A headroom as large
    as the budget is legal but useless: the window then always anchors at ``S_must``."""

    tokens: int
    messages: int

    def __post_init__(self) -> None:
        if self.tokens < 0 or self.messages < 0:
            raise ValueError("the anchor headroom must not be negative")


@dataclass(frozen=True, slots=True)
class WindowAnchor:
    """The window's first seq, and the fold mark it was chosen under; ``snapshot`` the
    summary in force for it (None: none stored, so a fold landing re-anchors). The
    snapshot is what the anchor carries, not what it is: two anchors at one seq and mark
    are equal whatever they carry."""

    seq: int
    folded_through: int
    snapshot: SummarySnapshot | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class AlignedWindow:
    """The window (as :func:`bound_history` returns one) and how it was chosen.

    ``reason`` is set when ``outcome == "reanchored"``. ``anchor`` is the anchor in force
    after this turn: the one kept, the new one, or None after a fallback (there is none).
    ``shown`` is the summary the prompt shows and its mark: the anchor's snapshot while
    it is kept, else the newest; ``behind`` how many seqs the fold has absorbed past it.
    """

    window: Window
    outcome: AnchorOutcome
    reason: ReanchorReason | None
    anchor: WindowAnchor | None
    shown: SummarySnapshot = SummarySnapshot(None, 0)
    behind: int = 0

    @property
    def anchor_to_store(self) -> WindowAnchor | None:
        """The anchor to write to the ``state`` item, or None when nothing changed.

        A fallback writes nothing: the stored anchor cannot be kept next turn anyway
        (its window holds this turn's, which is over the budget) unless the fold moves,
        which re-anchors.
        """
        return self.anchor if self.outcome == "reanchored" else None


def cache_aligned_window(
    newest_first: Iterable[HistoryMessage],
    limits: WindowLimits,
    *,
    folded_through: int,
    anchor: WindowAnchor | None,
    headroom: AnchorHeadroom,
    summary: str | None = None,
    cold: bool = False,
) -> AlignedWindow:
    """Choose the window for this turn: keep ``anchor``, re-anchor, or fall back.

    ``cold``: no cache entry of the conversation is alive (the caller knows it from the
    stored bills or the gap since the last question), so keeping the anchor saves nothing:
    a window that would be kept re-anchors instead (reason ``cold``), with the newest
    summary and the whole headroom.

    ``anchor`` is the one stored after the last turn (None on a conversation's first
    turn in this mode), with the summary snapshot it carries; ``folded_through`` and
    ``summary`` are the newest fold's. A snapshot is in force only when its mark is the
    anchor's and not past the newest; a new anchor carries the newest summary (when it is
    small enough, :attr:`SummarySnapshot.storable`). A
    fallback's window is :func:`bound_history`'s, so when it says ``floor_needs_older`` the
    caller reads further back and calls again, as it would for the sliding window.
    """
    folded = max(folded_through, 0)
    newest = SummarySnapshot(summary, folded)
    reader = _Reader(newest_first, limits)
    floor = _floor_start(reader)
    if floor is None:  # the floor ends on answers whose question is beyond the input
        return _fallback(reader, limits, newest)
    if not reader.read_messages:
        return _empty(folded, anchor, newest)
    lagged = _lagged(anchor, folded)
    reason: ReanchorReason | None = None
    if anchor is not None and lagged is not None:
        lag_must = _must_start(reader, floor, lagged.folded_through)
        if lag_must is None:
            reason = "overflow"  # the snapshot's unfolded tail alone is over the budget
        else:
            kept, reason = _kept_start(reader, lag_must, lagged.folded_through, anchor)
            if kept is not None and cold:
                reason = "cold"
            elif kept is not None:
                window = reader.window(kept)
                behind = folded - lagged.folded_through
                return AlignedWindow(window, "kept", None, anchor, lagged, behind)
    must = _must_start(reader, floor, folded)
    if must is None:
        return _fallback(reader, limits, newest)
    if reason is None:
        kept, reason = _kept_start(reader, must, folded, anchor)
        if kept is not None and cold:
            reason = "cold"
        elif kept is not None:
            return AlignedWindow(reader.window(kept), "kept", None, anchor, newest)
    start = _extend(reader, must, headroom)
    new_anchor = WindowAnchor(reader.seq(start), folded, _snapshot_of(newest))
    return AlignedWindow(reader.window(start), "reanchored", reason, new_anchor, newest)


def _snapshot_of(newest: SummarySnapshot) -> SummarySnapshot | None:
    return newest if newest.storable else None


def _lagged(anchor: WindowAnchor | None, folded: int) -> SummarySnapshot | None:
    """The snapshot in force for ``anchor``, if any: taken under the anchor's fold mark, and
    not past the newest (a mark that moved backwards is no fold the snapshot can lag)."""
    snapshot = anchor.snapshot if anchor is not None else None
    if anchor is None or snapshot is None:
        return None
    if snapshot.folded_through != anchor.folded_through or snapshot.folded_through > folded:
        return None
    return snapshot


class _Reader:
    """The history newest first, read on demand, each message trimmed and costed once.

    Index ``i`` is the ``i``-th newest message; the window ``[i, newest]`` holds
    ``i + 1`` messages and ``cost(i)`` tokens.
    """

    __slots__ = ("_costs", "_kept", "_originals", "_source", "_trimmed", "limits")

    def __init__(self, newest_first: Iterable[HistoryMessage], limits: WindowLimits) -> None:
        self._source = iter(newest_first)
        self.limits = limits
        self._originals: list[HistoryMessage] = []
        self._kept: list[HistoryMessage] = []
        self._costs: list[int] = []
        self._trimmed: list[int] = []

    @property
    def read_messages(self) -> int:
        return len(self._kept)

    def has(self, index: int) -> bool:
        """Whether message ``index`` exists, reading up to it if needed."""
        while len(self._kept) <= index:
            original = next(self._source, None)
            if original is None:
                return False
            content = trim_message(original.content, self.limits.message_max_tokens)
            was_trimmed = content is not original.content
            kept = HistoryMessage(original.seq, original.role, content) if was_trimmed else original
            self._originals.append(original)
            self._kept.append(kept)
            self._costs.append((self._costs[-1] if self._costs else 0) + estimate_tokens(content))
            self._trimmed.append((self._trimmed[-1] if self._trimmed else 0) + was_trimmed)
        return True

    def seq(self, index: int) -> int:
        return self._kept[index].seq

    def opens_exchange(self, index: int) -> bool:
        """A question, or the conversation's first message (leading answers' exchange)."""
        message = self._kept[index]
        return message.role == "user" or message.seq == 1

    def fits(self, index: int, *, tokens: int, messages: int) -> bool:
        return index + 1 <= messages and self._costs[index] <= tokens

    def within_budget(self, index: int) -> bool:
        return self.fits(index, tokens=self.limits.max_tokens, messages=self.limits.max_messages)

    def window(self, start: int) -> Window:
        return Window(
            messages=tuple(reversed(self._kept[: start + 1])),
            dropped=self.seq(start) - 1,
            trimmed=self._trimmed[start],
            estimated_tokens=self._costs[start],
            floor_overrode_budget=False,
        )

    def unread(self) -> Iterator[HistoryMessage]:
        """Everything read so far (as given, untrimmed), then the rest of the input."""
        return chain(self._originals, self._source)


def _floor_start(reader: _Reader) -> int | None:
    """Index of the floor's start (rule 3); None when it would open on an answer whose
    question lies beyond the input. An empty or short history is its own floor."""
    index = reader.limits.floor_messages - 1
    while reader.has(index) and not reader.opens_exchange(index):
        index += 1
    if reader.has(index):
        return index
    last = reader.read_messages - 1
    if last < 0 or reader.opens_exchange(last):
        return last
    return None


def _must_start(reader: _Reader, floor: int, folded: int) -> int | None:
    """Index of ``S_must``: the floor's start or the oldest unfolded message, whichever
    is older, moved out to its exchange's start. None when ``[S_must, newest]`` exceeds
    the budget or reaches past the input (the turn falls back)."""
    index = floor
    # Out to the oldest unfolded message (stop once a folded one is read), then out to
    # the start of its exchange.
    while (reader.has(index + 1) and reader.seq(index + 1) > folded) or not (
        reader.opens_exchange(index)
    ):
        if not reader.has(index + 1):
            return None  # the tail runs past the input, or answers whose question is unread
        index += 1
        if not reader.within_budget(index):
            return None
    if reader.seq(index) > folded + 1 and not reader.has(index + 1):
        return None  # the unfolded tail runs past the input (a full page)
    return index if reader.within_budget(index) else None


def _kept_start(
    reader: _Reader, must: int, folded: int, anchor: WindowAnchor | None
) -> tuple[int, None] | tuple[None, ReanchorReason]:
    """The index ``anchor`` starts the window at, if it is kept; else why it is not."""
    if anchor is None:
        return None, "first_turn"
    if anchor.folded_through != folded:
        return None, "fold_moved"
    if anchor.seq > reader.seq(must) or anchor.seq < 1:
        return None, "invalid"  # beyond S_must (or the newest message), or no seq at all
    index = must
    while reader.seq(index) > anchor.seq:
        if not reader.has(index + 1):
            return None, "overflow"  # older than the input: [A, newest] exceeds the cap
        index += 1
        if not reader.within_budget(index):
            return None, "overflow"
    if reader.seq(index) != anchor.seq or not reader.opens_exchange(index):
        return None, "invalid"  # its message is missing from the history, or opens none
    return index, None


def _extend(reader: _Reader, start: int, headroom: AnchorHeadroom) -> int:
    """Extend backwards from ``start`` in whole exchanges while the window stays within
    the budget less ``headroom``; the first exchange that does not fit ends it."""
    limits = reader.limits
    tokens = limits.max_tokens - headroom.tokens
    messages = limits.max_messages - headroom.messages
    while True:
        index = start + 1
        while reader.has(index) and reader.fits(index, tokens=tokens, messages=messages):
            if reader.opens_exchange(index):
                break
            index += 1
        else:
            # Over the room, or the input ended mid-exchange (its question is unread).
            return start
        start = index


def _fallback(reader: _Reader, limits: WindowLimits, newest: SummarySnapshot) -> AlignedWindow:
    return AlignedWindow(bound_history(reader.unread(), limits), "fallback", None, None, newest)


def _empty(folded: int, anchor: WindowAnchor | None, newest: SummarySnapshot) -> AlignedWindow:
    """No history: the window is empty; it anchors on seq 1, the start of any history."""
    empty = Window(
        messages=(), dropped=0, trimmed=0, estimated_tokens=0, floor_overrode_budget=False
    )
    first = WindowAnchor(1, folded)
    reason: ReanchorReason = "invalid"
    if anchor == first:
        return AlignedWindow(empty, "kept", None, anchor, newest)
    if anchor is None:
        reason = "first_turn"
    elif anchor.folded_through != folded:
        reason = "fold_moved"
    first = WindowAnchor(1, folded, _snapshot_of(newest))
    return AlignedWindow(empty, "reanchored", reason, first, newest)
