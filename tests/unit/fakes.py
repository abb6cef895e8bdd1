"""In-memory stand-ins for the stage's ports, shared by the unit tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.conftest import settings as placeholder_settings
from worker.ports import CommandLedger, MessageSender
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

    async def send(
        self,
        body: str,
        *,
        group_id: str,
        deduplication_id: str,
        attributes: Mapping[str, str | int] | None = None,
    ) -> str:
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
) -> ConverseStage:
    """A ConverseStage over the given ports: the clock stopped at ``NOW``, a 60 s lease,
    no S3, a compaction queue that keeps what it is sent unless one is given, and the
    placeholder settings unless others are."""
    extra = {} if sleep is None else {"sleep": sleep}
    return ConverseStage(
        history=history,
        ledger=ledger,
        model_queue=model_queue,
        compaction_queue=compaction_queue or MemoryQueue(),
        objects=NoObjects(),
        settings=settings or placeholder_settings(),
        lease=timedelta(seconds=60),
        clock=lambda: NOW,
        **extra,
    )
