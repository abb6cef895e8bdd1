"""The one reader of what other stages store: each item of a history page, parsed once, at the
edge, into typed values, or refused with a reason. It never raises.

- A message (:func:`read_message`): the typed message, or the reason it is left out.
- A bill (:func:`~worker.adapters.stored_bills.read_bill`, on each answer): the typed
  :class:`ModelUsage`, or the reason it is dropped whole, never half-used: the turn then goes
  on as if that answer had no bill.
- The ``state`` item (:func:`read_state`): the fold state and the anchor; each malformed
  attribute either read as its safe reading, or, where none exists, the refusal of the
  command that names it.

What each attribute may hold, and what a malformed one does, is declared in
:mod:`worker.adapters.stored_attributes`, and each kind of value is read by one primitive of
:mod:`worker.adapters.stored_values`. Reasons name the attribute and what is wrong with it,
never the value: a stored value can be privileged text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from worker.adapters.stored_attributes import MAX_SEQ
from worker.adapters.stored_bills import read_bill
from worker.adapters.stored_values import Item, Unreadable, as_text, as_time, as_whole_number, fail
from worker.caching.anchor import SummarySnapshot, WindowAnchor
from worker.caching.bills import ModelUsage
from worker.memory import FoldState, HistoryMessage
from worker.memory.history_window import Role
from worker.ports import StoredDefect

T = TypeVar("T")

_MESSAGE_KEY = re.compile(r"msg#(\d{12})", re.ASCII)
_ROLES: Mapping[object, Role] = {"user": "user", "assistant": "assistant"}


@dataclass(frozen=True, slots=True)
class MessageReading:
    """A stored message: the typed message, its bill (or the reason it was dropped), and the
    optional attributes read as absent."""

    message: HistoryMessage
    bill: ModelUsage | None = None
    dropped_bill: StoredDefect | None = None
    ignored: tuple[StoredDefect, ...] = ()


def read_message(item: Item) -> MessageReading | str:
    """A message item, or the reason it is left out (never its content)."""
    try:
        sk = as_text(item.get("sk"), "sk") or ""
        key = _MESSAGE_KEY.fullmatch(sk)
        if key is None:
            return "sk: not a message key (a stray item)"
        seq = int(key.group(1))
        if seq == 0:
            fail("sk", "seq 0 (seqs start at 1)")
        stored = as_whole_number(item.get("seq"), "seq", low=1, high=MAX_SEQ)
        if stored is not None and stored != seq:
            fail("seq", "not the key's own")
        stored_role = as_text(item.get("role"), "role")
        role = _ROLES.get(stored_role)
        if role is None:
            fail("role", "missing" if stored_role is None else "neither user nor assistant")
        content = as_text(item.get("content"), "content")
        if content is None:
            fail("content", "missing")
    except Unreadable as exc:
        return f"{exc.attribute}: {exc.reason}"
    ignored: list[StoredDefect] = []
    try:
        created_at = as_time(item.get("created_at"), "created_at")
    except Unreadable as exc:
        created_at = None
        ignored.append(StoredDefect(exc.attribute, exc.reason, seq=seq))
    message = HistoryMessage(seq=seq, role=role, content=content, created_at=created_at)
    if role != "assistant":
        return MessageReading(message, ignored=tuple(ignored))
    bill = read_bill(item.get("model_usage"), seq)
    if isinstance(bill, StoredDefect):
        return MessageReading(message, dropped_bill=bill, ignored=tuple(ignored))
    return MessageReading(message, bill=bill, ignored=tuple(ignored))


# --- the state item ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StateReading:
    """The ``state`` item as the turn may use it: the fold state and the anchor, each
    malformed attribute read as its safe reading (``ignored``), or ``refusal`` naming the
    attribute no reading makes safe."""

    state: FoldState = field(default_factory=FoldState)
    anchor: WindowAnchor | None = None
    ignored: tuple[StoredDefect, ...] = ()
    refusal: StoredDefect | None = None


def read_state(item: Item) -> StateReading:
    """The ``state`` item (see :mod:`worker.adapters.stored_attributes` for each reading)."""
    try:
        folded = as_whole_number(item.get("folded_through"), "folded_through", low=0, high=MAX_SEQ)
        summary = as_text(item.get("fold_summary"), "fold_summary")
    except Unreadable as exc:
        return StateReading(refusal=StoredDefect(exc.attribute, exc.reason))
    lenient = _Lenient(item)
    version = lenient.mark("compaction_request_version")
    state = FoldState(
        folded_through=folded or 0,
        summary=summary,
        requested_through=lenient.mark("compaction_requested_through"),
        requested_at=lenient.time("compaction_requested_at"),
        request_version=version or 0,
        unreadable_version=(
            _as_stored(item.get("compaction_request_version"))
            if lenient.failed("compaction_request_version")
            else None
        ),
    )
    anchor_seq = lenient.mark("window_anchor", low=1)
    anchor_folded = lenient.mark("window_anchor_folded_through")
    snapshot_folded = lenient.mark("window_summary_folded_through")
    snapshot_text = lenient.text("window_summary")
    snapshot = None
    if snapshot_folded is not None and not lenient.failed("window_summary"):
        snapshot = SummarySnapshot(snapshot_text, snapshot_folded)
    anchor = None
    if anchor_seq is not None and anchor_folded is not None:
        anchor = WindowAnchor(anchor_seq, anchor_folded, snapshot=snapshot)
    return StateReading(state=state, anchor=anchor, ignored=tuple(lenient.ignored))


class _Lenient:
    """Reads the state item's optional attributes, each malformed one as absent, noting it."""

    def __init__(self, item: Item) -> None:
        self._item = item
        self.ignored: list[StoredDefect] = []

    def failed(self, name: str) -> bool:
        return any(defect.attribute == name for defect in self.ignored)

    def mark(self, name: str, *, low: int = 0) -> int | None:
        return self._read(name, lambda value: as_whole_number(value, name, low=low, high=MAX_SEQ))

    def time(self, name: str) -> datetime | None:
        return self._read(name, lambda value: as_time(value, name))

    def text(self, name: str) -> str | None:
        return self._read(name, lambda value: as_text(value, name))

    def _read(self, name: str, read: Callable[[object], T | None]) -> T | None:
        try:
            return read(self._item.get(name))
        except Unreadable as exc:
            self.ignored.append(StoredDefect(exc.attribute, exc.reason))
            return None


def _as_stored(value: object) -> tuple[str, str | None]:
    """An unreadable version as the claim's condition needs it: its DynamoDB type and, for a
    string or a number, its value exactly as stored (compared as it stands)."""
    if not isinstance(value, Mapping) or len(value) != 1:
        return "", None
    ((kind, inner),) = value.items()
    return str(kind), inner if kind in ("S", "N") and isinstance(inner, str) else None
