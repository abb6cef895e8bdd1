"""Mira's memory: the window (newest messages, bounded) and the fold (everything older).

The two halves are coupled: the window budget must stay at least twice the fold
trigger (see :class:`worker.settings.Settings`), or a stretch of conversation
could age out of the window before it is large enough to be folded.

Owns: the window (trim, floor, budget: :mod:`~worker.memory.history_window`), the token
estimate, the Converse view, and the fold trigger with its gap check
(:mod:`~worker.memory.fold`). Pure: plain functions over plain values, no I/O, no logging.
Imports nothing else of :mod:`worker` (checked by import-linter). The cache-aligned mode
built on it is :mod:`worker.caching`; the fold request's claim and send is the turn's
(:mod:`worker.turn.writing`).
"""

from worker.memory.converse import ConverseView, LeftOut, is_blank, render_converse
from worker.memory.fold import (
    CompactionPlan,
    FoldGap,
    FoldLimits,
    FoldState,
    fold_gap,
    is_pending,
    plan_compaction,
)
from worker.memory.history_window import HistoryMessage, Role, Window, WindowLimits, bound_history
from worker.memory.tokens import estimate_tokens
from worker.memory.trim import HEAD_TOKENS, TAIL_TOKENS, omission_marker, trim_message

__all__ = [
    "HEAD_TOKENS",
    "TAIL_TOKENS",
    "CompactionPlan",
    "ConverseView",
    "FoldGap",
    "FoldLimits",
    "FoldState",
    "HistoryMessage",
    "LeftOut",
    "Role",
    "Window",
    "WindowLimits",
    "bound_history",
    "estimate_tokens",
    "fold_gap",
    "is_blank",
    "is_pending",
    "omission_marker",
    "plan_compaction",
    "render_converse",
    "trim_message",
]
