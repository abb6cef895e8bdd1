"""In-memory stand-ins for the stage's ports, shared by the unit tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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
