"""In-memory stand-ins for the stage's ports, shared by the unit tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Unpack

from tests.conftest import settings as placeholder_settings
from worker.caching.anchor import WindowAnchor
from worker.memory import FoldState, HistoryMessage, Role
from worker.ports import CommandLedger, FoldClaim, HistoryPage, MessageSender, SendOptions
from worker.settings import Settings
from worker.turn.stage import ConverseStage, History

#: The stopped clock of the stages built here.
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


@dataclass
class MemoryQueue:
    """A MessageSender that keeps each JSON body it is sent, decoded."""

    sent: list[dict[str, Any]] = field(default_factory=list)
    error: Exception | None = None  # if set, every send raises it
    gate: asyncio.Event | None = None  # if given, a send waits for it
    reached: asyncio.Event = field(default_factory=asyncio.Event)  # a send has begun

    async def send(self, body: str, **options: Unpack[SendOptions]) -> str:
        self.reached.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        self.sent.append(json.loads(body))
        return f"id-{len(self.sent)}"


class NoObjects:
    async def put(self, bucket: str, key: str, data: bytes) -> None:
        raise AssertionError("no payload here goes to S3")

    async def get(self, bucket: str, key: str, *, max_bytes: int) -> bytes:
        raise AssertionError("no command here is an S3 pointer")


def memory_stage(
    *,
    history: History,
    ledger: CommandLedger,
    model_queue: MessageSender,
    compaction_queue: MessageSender | None = None,
    settings: Settings | None = None,
    sleep: Callable[[float], Awaitable[None]] | None = None,
    now: datetime = NOW,
) -> ConverseStage:
    """A ConverseStage over the given ports: the clock stopped at ``now`` (``NOW`` unless
    given), a 60 s lease, no S3, a compaction queue that keeps what it is sent unless one is
    given, and the placeholder settings unless others are."""
    extra = {} if sleep is None else {"sleep": sleep}
    return ConverseStage(
        history=history,
        ledger=ledger,
        model_queue=model_queue,
        compaction_queue=compaction_queue or MemoryQueue(),
        objects=NoObjects(),
        settings=settings or placeholder_settings(),
        lease=timedelta(seconds=60),
        clock=lambda: now,
        **extra,
    )


@dataclass
class HistoryTable:
    """One conversation's history table in memory, as DynamoDB behaves for the stage.

    A Query returns the ``state`` item first (with the window's anchor, when stored), then
    the newest messages, stops at its limit and says where the next older page starts. A
    claim is a conditional write on the request mark's version; with an anchor, the same
    write stores it. Every write to the ``state`` item is recorded in ``writes`` (what it
    set), so a test counts the calls a turn made. ``anchor_error``, if set, fails every
    anchor write of its own (a claim carrying one still succeeds).
    """

    messages: dict[int, HistoryMessage] = field(default_factory=dict)
    state: FoldState | None = None
    anchor: WindowAnchor | None = None
    queries: list[str | None] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    #: The ``through`` of every claim won, in order.
    claims: list[int] = field(default_factory=list)
    anchor_error: Exception | None = None

    def append(self, *spec: tuple[Role, str]) -> None:
        for role, content in spec:
            seq = len(self.messages) + 1
            self.messages[seq] = HistoryMessage(seq, role, content)

    async def load_page(
        self, conversation_id: str, limit: int, *, older_than: str | None = None
    ) -> HistoryPage:
        self.queries.append(older_than)
        keys: list[tuple[str, HistoryMessage | None]] = [
            (f"msg#{seq:012d}", message) for seq, message in sorted(self.messages.items())
        ]
        has_state = self.state is not None or self.anchor is not None
        if has_state:
            keys.append(("state", None))
        newest_first = [k for k in reversed(keys) if older_than is None or k[0] < older_than]
        read = newest_first[:limit]
        first = older_than is None
        return HistoryPage(
            state=(self.state or FoldState()) if first else FoldState(),
            messages=tuple(m for _, m in read if m is not None),
            older=read[-1][0] if len(read) == limit else None,
            anchor=self.anchor if first else None,
        )

    async def claim_compaction(
        self, claim: FoldClaim, *, anchor: WindowAnchor | None = None
    ) -> bool:
        self.writes.append("claim" if anchor is None else "claim+anchor")
        current = self.state or FoldState()
        if current.request_version != claim.seen.request_version:
            return False
        self.state = replace(
            current,
            requested_through=claim.plan.through,
            requested_at=claim.claimed_at,
            request_version=claim.seen.request_version + 1,
        )
        self.claims.append(claim.plan.through)
        if anchor is not None:
            self.anchor = anchor
        return True

    async def release_compaction(self, claim: FoldClaim) -> None:
        self.writes.append("release")
        current = self.state or FoldState()
        seen = claim.seen
        if current.request_version == seen.request_version + 1:
            self.state = replace(
                current,
                requested_through=seen.requested_through,
                requested_at=seen.requested_at,
                request_version=seen.request_version,
            )

    async def store_anchor(self, conversation_id: str, anchor: WindowAnchor) -> None:
        self.writes.append("anchor")
        if self.anchor_error is not None:
            raise self.anchor_error
        self.anchor = anchor

    def fold(self, through: int, summary: str) -> None:
        """The compactor: the fold mark moves forward to ``through``."""
        current = self.state or FoldState()
        self.state = replace(current, folded_through=through, summary=summary)
