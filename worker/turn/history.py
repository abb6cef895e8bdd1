"""The turn's I/O around the memory core: how far back it reads, what it logs of the
core's work, and the fold request's send.

A turn reads one page of the history table. Only when the window's floor would open on
an answer whose question lies beyond that page (a run of answers longer than a page)
does it read older pages, one Query each, until the question is in or nothing older is
left. The window is the sliding one (:func:`bound_history`) or, with
``HISTORY_WINDOW_MODE=cache-aligned``, the cache-aligned one, whose stored anchor and summary
snapshot come in the same Query (on the ``state`` item); that mode's view then carries the
cache lifetimes ``HISTORY_CACHE_TTL`` chooses (:mod:`worker.memory.cache_ttl`), read from the
page's ``created_at`` and the command's ``sent_at``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from worker.logs import get_logger
from worker.memory import (
    CompactionPlan,
    ConverseView,
    FoldGap,
    Window,
    bound_history,
    render_converse,
)
from worker.memory.cache_aligned import AlignedWindow, WindowAnchor, cache_aligned_window
from worker.memory.cache_ttl import TtlChoice, choose_ttls, read_pace, turn_shape
from worker.memory.converse import previous_history_end, with_cache_ttls
from worker.ports import HistoryPage, HistoryStore, MessageSender
from worker.settings import Settings
from worker.turn.commands import ConverseCommand, compaction_request, encode_body

log = get_logger()


@dataclass(frozen=True, slots=True)
class TurnWindow:
    """What a turn read and the window it chose; ``aligned`` in the cache-aligned mode."""

    page: HistoryPage
    window: Window
    aligned: AlignedWindow | None = None
    settings: Settings | None = None

    @property
    def anchor_to_write(self) -> WindowAnchor | None:
        """The anchor this turn must store: a new one that the ``state`` item does not
        already hold with the same snapshot (nothing is written when the stored one stays,
        or equals the new)."""
        new = self.aligned.anchor_to_store if self.aligned is not None else None
        stored = self.page.anchor
        if new is None or (
            new == stored and stored is not None and stored.snapshot == new.snapshot
        ):
            return None
        return new

    @property
    def memory(self) -> tuple[str | None, int]:
        """The summary the prompt shows and its fold mark: the snapshot in force in the
        cache-aligned mode (fold-lagged), else the newest."""
        if self.aligned is not None:
            return self.aligned.shown.summary, self.aligned.shown.folded_through
        return self.page.state.summary, self.page.state.folded_through

    def view(self, message: str, *, sent_at: datetime | None = None) -> ConverseView:
        """The model-ready view; with the history's cache points in the cache-aligned mode."""
        return self.cached_view(message, sent_at=sent_at)[0]

    def cached_view(
        self, message: str, *, sent_at: datetime | None = None
    ) -> tuple[ConverseView, TtlChoice | None]:
        """The view and, in the cache-aligned mode, the TTLs its cache points carry
        (``HISTORY_CACHE_TTL``; ``adaptive`` reads the pace from the page's questions'
        ``created_at`` and ``sent_at``, when the current question was sent)."""
        summary = self.memory[0]
        aligned, settings = self.aligned, self.settings
        if aligned is None:
            return render_converse(self.window, message, summary), None
        view = render_converse(
            self.window,
            message,
            summary,
            cache_history=True,
            previous_history_end=previous_history_end(self.window),
        )
        settings = settings or Settings.at_defaults()
        stored = self.page.anchor
        shape = turn_shape(
            view,
            self.window,
            settings.window_limits,
            current=message,
            outcome=aligned.outcome,
            shared_through=previous_history_end(self.window),
            summary_shared=stored is not None
            and stored.folded_through == aligned.shown.folded_through,
            behind=aligned.behind,
        )
        questions = [m.created_at for m in reversed(self.page.messages) if m.role == "user"]
        choice = choose_ttls(
            shape,
            read_pace(questions, sent_at),
            setting=settings.history_cache_ttl,
            min_tokens=settings.prompt_cache_min_tokens,
        )
        return with_cache_ttls(view, choice.ttls), choice


def choose_window(page: HistoryPage, settings: Settings) -> TurnWindow:
    """The window of the configured mode over what ``page`` holds (the cache-aligned one
    with the anchor from the page's ``state`` item)."""
    if not settings.cache_aligned:
        return TurnWindow(page, bound_history(page.messages, settings.window_limits))
    aligned = cache_aligned_window(
        page.messages,
        settings.window_limits,
        folded_through=page.state.folded_through,
        anchor=page.anchor,
        headroom=settings.anchor_headroom,
        summary=page.state.summary,
    )
    return TurnWindow(page, aligned.window, aligned, settings)


async def read_turn_window(
    store: HistoryStore, conversation_id: str, settings: Settings
) -> TurnWindow:
    """The newest page, extended by older pages while the window's floor needs them (a
    fallback's, in the cache-aligned mode), and the window of the configured mode over
    what was read."""
    size = settings.history_page_size
    page = await store.load_page(conversation_id, size)
    read = choose_window(page, settings)
    while page.older is not None and read.window.floor_needs_older:
        page = page.extended_by(await store.load_page(conversation_id, size, older_than=page.older))
        read = choose_window(page, settings)
    return read


def fold_request_sender(
    queue: MessageSender, command: ConverseCommand, *, claimed_at: datetime
) -> Callable[[CompactionPlan], Awaitable[object]]:
    """How the enqueuer sends a plan: the contract's compaction request on ``queue``.

    The deduplication id names the claim (stretch and time), so a request sent again after
    the retry period is a new message while a retried send of one claim is not.
    """

    async def send(plan: CompactionPlan) -> str:
        return await queue.send(
            encode_body(compaction_request(command, plan)),
            group_id=command.conversation_id,
            deduplication_id=f"compact:{command.conversation_id}:{plan.through}:"
            f"{int(claimed_at.timestamp())}",
        )

    return send


def log_memory(
    page: HistoryPage,
    window: Window,
    gap: FoldGap | None,
    view: ConverseView,
    *,
    aligned: AlignedWindow | None = None,
) -> None:
    """Log what the core did to this turn's history: ids and counts, never content. In the
    cache-aligned mode (``aligned``) the window line also says how the window was chosen."""
    if page.malformed:
        log.warning(
            "clerk.converse_history_entries_dropped",
            count=len(page.malformed),
            reasons=dict(Counter(page.malformed)),
        )
    if window.dropped or page.queries > 1:
        anchor: dict[str, str] = {} if aligned is None else {"anchor": aligned.outcome}
        if aligned is not None and aligned.reason is not None:
            anchor["anchor_reason"] = aligned.reason
        log.info(
            "clerk.converse_history_window_bounded",
            dropped=window.dropped,
            kept=window.kept,
            trimmed=window.trimmed,
            estimated_tokens=window.estimated_tokens,
            floor_overrode_budget=window.floor_overrode_budget,
            extra_queries=page.queries - 1,
            **anchor,
        )
    if gap is not None:
        log.warning(
            "clerk.converse_history_fold_gap",
            unfolded_dropped=gap.count,
            first_seq=gap.first_seq,
            last_seq=gap.last_seq,
        )
    if view.left_out:
        log.info(
            "clerk.converse_messages_left_out",
            count=len(view.left_out),
            reasons=dict(Counter(left.reason for left in view.left_out)),
        )


def log_anchor(read: TurnWindow, ttls: TtlChoice | None = None) -> None:
    """The cache-aligned window's choice, every turn of that mode: kept, re-anchored (and
    why) or fell back; the anchor in force after the turn, the one the ``state`` item held,
    and whether this turn stores a new one; the summary shown (its mark, how far the newest
    fold is past it, whether a snapshot is held); the TTL of each cache point and why (the
    gaps read, the chances of a gap within 5 minutes and 1 hour, the prefix expected to be
    read). Seqs, marks, counts and times only, never content."""
    aligned = read.aligned
    if aligned is None:
        return
    after, stored = aligned.anchor, read.page.anchor
    pace = ttls.pace if ttls is not None else None
    log.info(
        "clerk.converse_window_anchor",
        summary_folded_through=aligned.shown.folded_through,
        summary_behind=aligned.behind,
        snapshot=after is not None and after.snapshot is not None,
        ttls=[ttl or "none" for ttl in ttls.ttls] if ttls is not None else None,
        ttl_why=ttls.why if ttls is not None else None,
        pace_gaps=len(pace.gaps) if pace is not None else 0,
        pace_newest_gap_s=round(pace.gaps[-1]) if pace is not None and pace.gaps else None,
        pace_p5=round(pace.p5, 3) if pace is not None else None,
        pace_p60=round(pace.p60, 3) if pace is not None else None,
        expected_read=ttls.read if ttls is not None else None,
        outcome=aligned.outcome,
        reason=aligned.reason,
        anchor_seq=after.seq if after is not None else None,
        anchor_folded_through=after.folded_through if after is not None else None,
        stored_seq=stored.seq if stored is not None else None,
        stored_folded_through=stored.folded_through if stored is not None else None,
        write=read.anchor_to_write is not None,
    )
