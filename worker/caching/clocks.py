"""Two clocks, reconciled: each conversation's offset between the model stage's clock (a bill's
``answered_at``) and the producers' (its questions' ``created_at``, the command's ``sent_at``).

An answer is made after its own question and before the next one. So each answer whose
question is stamped bounds the offset from above (``answered_at - asked``: the answer cannot
precede its question) and, when the question after it is stamped too (or, for the newest, the
command in hand), from below. The offset taken is the upper bound's median over the page's
answers (the model answers seconds after the question; the median is not moved by one answer
given late, or one question stamped late), raised to the lower bounds where it would put an
answer after the next question; within :data:`IN_STEP_SECONDS` it is the call's latency and
the clocks are taken to agree. Subtracted from every ``answered_at``, it puts the bills on
the producers' clock, the one ``sent_at`` is on: a model stage two hours behind, or five
minutes ahead, then neither kills a warm cache nor revives a cold one.

Pure: times in, one offset out.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from worker.caching.bills import ModelUsage
from worker.memory.history_window import HistoryMessage


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """How far the model stage's clock runs ahead of the producers' (negative: behind), and
    how many answers said so (0: no answer's question is stamped, so none is assumed)."""

    seconds: float = 0.0
    samples: int = 0

    def on_producers_clock(self, usage: ModelUsage) -> ModelUsage:
        """``usage`` with its ``answered_at`` on the producers' clock."""
        if usage.answered_at is None or self.seconds == 0.0:
            return usage
        return replace(usage, answered_at=usage.answered_at - timedelta(seconds=self.seconds))


NO_OFFSET = ClockOffset()
#: An offset within this much is the model call's own latency, not a clock apart: the clocks
#: are taken to agree (correcting by the latency would age every entry by it).
IN_STEP_SECONDS = 60.0
#: Answers from which a median is taken (fewer: the tightest bound, or none below).
MEDIAN_FROM = 3


def reconcile(
    usages: Sequence[ModelUsage],
    messages_newest_first: Sequence[HistoryMessage],
    sent_at: datetime | None,
) -> ClockOffset:
    """The offset the page's bills (``usages``) and questions show, with the command's
    ``sent_at`` as the question after the newest answer."""
    questions = sorted(
        (m.seq, m.created_at)
        for m in messages_newest_first
        if m.role == "user" and m.created_at is not None
    )
    above: list[float] = []
    below: list[float] = []
    for index, usage in enumerate(usages):
        if usage.answered_at is None:
            continue
        before = [at for seq, at in questions if seq < usage.seq]
        after = [at for seq, at in questions if seq > usage.seq]
        if before:
            above.append((usage.answered_at - before[-1]).total_seconds())
        following = after[0] if after else (sent_at if index == 0 else None)
        if following is not None:
            below.append((usage.answered_at - following).total_seconds())
    if not above:
        return NO_OFFSET
    offset = statistics.median(above) if len(above) >= MEDIAN_FROM else min(above)
    if len(below) >= MEDIAN_FROM:
        # Most answers after the question that followed them: the offset is at least that.
        offset = max(offset, statistics.median(below))
    if abs(offset) <= IN_STEP_SECONDS:
        return ClockOffset(0.0, len(above))
    return ClockOffset(offset, len(above))
