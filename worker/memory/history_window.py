"""The window: which history messages ride with the current counsel message.

Rules, in order (``docs/CONTRACT.md``, "The window rules"):

1. TRIM each history message above the per-message budget (:func:`trim_message`).
2. NEVER trim the current counsel message: it is not history and never enters here.
3. FLOOR: keep the newest ``floor_messages`` whatever they cost; if the oldest of
   them is an answer, the edge moves outward to the question it answers. When that
   question lies beyond the input (a run of answers longer than the page read), the
   window says so (:attr:`Window.floor_needs_older`) and the caller reads further back.
4. BUDGET: extend backwards one whole exchange (a question and the answers that
   follow it) at a time while the window stays within ``max_messages`` and
   ``max_tokens``. The first exchange that does not fit closes the window.

The input is newest-first, as the store returns it, and is read lazily: reading
stops as soon as the window is closed, so a turn costs O(window), not O(history).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from worker.memory.tokens import estimate_tokens
from worker.memory.trim import trim_message

Role = Literal["user", "assistant"]
#: Why the window ends where it does: the input ran out (``history``: nothing older was
#: given, or only half an exchange), the next whole exchange would have passed the message
#: cap (``messages``) or the token budget (``tokens``), whichever it passed first as it was
#: read; or the floor alone was over the budget, so no exchange was tried (``floor``).
ClosedBy = Literal["history", "messages", "tokens", "floor"]


@dataclass(frozen=True, slots=True)
class HistoryMessage:
    """One stored message of a conversation; ``seq`` counts from 1 without gaps.
    ``created_at``: when the writer stored it (for a question, when counsel asked), if
    the item says; only the cache-aligned mode's TTL policy reads it."""

    seq: int
    role: Role
    content: str
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class WindowLimits:
    """The window's knobs; :class:`worker.settings.Settings` holds their values."""

    max_tokens: int
    max_messages: int
    floor_messages: int
    message_max_tokens: int


@dataclass(frozen=True, slots=True)
class Window:
    """What the window kept, oldest first, and what it did to get there.

    ``floor_needs_older``: the floor ends on answers whose question was not in the input
    (and the input did not reach seq 1), so the window opens on an answer; the caller
    should read older messages, when there are any, and bound again. ``closed_by``: why
    it ends where it does (:data:`ClosedBy`).
    """

    messages: tuple[HistoryMessage, ...]
    dropped: int
    trimmed: int
    estimated_tokens: int
    floor_overrode_budget: bool
    floor_needs_older: bool = False
    closed_by: ClosedBy = "history"

    @property
    def kept(self) -> int:
        return len(self.messages)

    @property
    def oldest_seq(self) -> int | None:
        return self.messages[0].seq if self.messages else None


class _Builder:
    """Accumulates the window newest-first, trimming each message once as it is read."""

    __slots__ = ("limits", "messages", "tokens", "trimmed")

    def __init__(self, limits: WindowLimits) -> None:
        self.limits = limits
        self.messages: list[HistoryMessage] = []
        self.tokens = 0
        self.trimmed = 0

    def prepare(self, message: HistoryMessage) -> tuple[HistoryMessage, int, bool]:
        content = trim_message(message.content, self.limits.message_max_tokens)
        was_trimmed = content is not message.content
        if was_trimmed:
            message = HistoryMessage(seq=message.seq, role=message.role, content=content)
        return message, estimate_tokens(content), was_trimmed

    def add(self, prepared: list[tuple[HistoryMessage, int, bool]]) -> None:
        for message, tokens, was_trimmed in prepared:
            self.messages.append(message)
            self.tokens += tokens
            self.trimmed += was_trimmed

    def build(
        self,
        *,
        floor_overrode_budget: bool,
        floor_needs_older: bool = False,
        closed_by: ClosedBy = "history",
    ) -> Window:
        oldest_first = tuple(reversed(self.messages))
        return Window(
            messages=oldest_first,
            dropped=oldest_first[0].seq - 1 if oldest_first else 0,
            trimmed=self.trimmed,
            estimated_tokens=self.tokens,
            floor_overrode_budget=floor_overrode_budget,
            floor_needs_older=floor_needs_older,
            closed_by=closed_by,
        )


def bound_history(newest_first: Iterable[HistoryMessage], limits: WindowLimits) -> Window:
    """Apply the window rules to a history given newest first; read no further than needed."""
    source = iter(newest_first)
    builder = _Builder(limits)
    if not _take_floor(source, builder):
        oldest = builder.messages[-1] if builder.messages else None
        return builder.build(
            floor_overrode_budget=_over_budget(builder),
            floor_needs_older=oldest is not None and oldest.role == "assistant" and oldest.seq > 1,
        )
    if _over_budget(builder):
        return builder.build(floor_overrode_budget=True, closed_by="floor")
    while (closed_by := _take_exchange(source, builder)) is None:
        pass
    return builder.build(floor_overrode_budget=False, closed_by=closed_by)


def _take_floor(source: Iterator[HistoryMessage], builder: _Builder) -> bool:
    """Keep the floor, its edge moved out to a question; False once the history is exhausted."""
    floor = builder.limits.floor_messages
    for message in source:
        builder.add([builder.prepare(message)])
        if len(builder.messages) >= floor and message.role == "user":
            return True
    return False


def _take_exchange(source: Iterator[HistoryMessage], builder: _Builder) -> ClosedBy | None:
    """Add the next older exchange if it fits whole (None); else why the window closes.

    An exchange is read from its newest answer back to its question. Reading stops
    the moment it can no longer fit, so a window never costs more than
    ``max_messages + 1`` messages read. Answers that reach the start of the conversation
    (seq 1) without a question are an exchange of their own; answers that merely reach
    the end of the input (a page whose older part was not read) are not taken.
    """
    limits = builder.limits
    room_messages = limits.max_messages - len(builder.messages)
    room_tokens = limits.max_tokens - builder.tokens
    exchange: list[tuple[HistoryMessage, int, bool]] = []
    tokens = 0
    for message in source:
        prepared = builder.prepare(message)
        exchange.append(prepared)
        tokens += prepared[1]
        if len(exchange) > room_messages:
            return "messages"
        if tokens > room_tokens:
            return "tokens"
        if message.role == "user":
            builder.add(exchange)
            return None
    if exchange and exchange[-1][0].seq == 1:
        builder.add(exchange)  # answers before the conversation's first question
    # Otherwise the input ended mid-exchange (a page, not the whole history): the
    # question is unseen, and half an exchange is never taken.
    return "history"


def _over_budget(builder: _Builder) -> bool:
    limits = builder.limits
    return builder.tokens > limits.max_tokens or len(builder.messages) > limits.max_messages
