"""A history without end, for the tests that pin how little of a page a window reads."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import cycle

from worker.memory import HistoryMessage, Role


class EndlessHistory:
    """Messages newest first from seq ``newest`` down, without end, the roles taking turns
    from ``newest_role``; ``read`` counts the messages taken so far."""

    def __init__(self, newest: int, newest_role: Role, content: str) -> None:
        self.newest = newest
        self.newest_role: Role = newest_role
        self.content = content
        self.read = 0

    def __iter__(self) -> Iterator[HistoryMessage]:
        other: Role = "user" if self.newest_role == "assistant" else "assistant"
        roles = cycle((self.newest_role, other))
        seq = self.newest
        while True:
            self.read += 1
            yield HistoryMessage(seq, next(roles), self.content)
            seq -= 1
