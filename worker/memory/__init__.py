"""Mira's memory: the window (newest messages, bounded) and the fold (everything older).

The two halves are coupled: the window budget must stay at least twice the fold
trigger (see :class:`worker.settings.Settings`), or a stretch of conversation
could age out of the window before it is large enough to be folded.

Owns: the window (trim, floor, budget), the token estimate, the Converse view, the fold
trigger and the compaction claims. Pure: plain functions over plain values, no I/O, no
logging. Imports nothing else of :mod:`worker` (checked by import-linter).
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
from worker.memory.tokens import estimate_tokens
from worker.memory.trim import HEAD_TOKENS, TAIL_TOKENS, omission_marker, trim_message
from worker.memory.window import HistoryMessage, Role, Window, WindowLimits, bound_history

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
