"""The bill's values: what a payload said it expected of the prompt cache (its ``cache`` block,
:class:`CacheExpectation`) and what the model's ``usage`` says happened (:class:`ModelUsage`,
the writer's ``model_usage``). Read from the table by :mod:`worker.adapters.stored_bills`;
priced by :mod:`worker.caching.prices`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from worker.caching.prices import PRICE_INPUT, PRICE_READ, PRICE_WRITE
from worker.memory.converse import CacheTtl


@dataclass(frozen=True, slots=True)
class ExpectedPoint:
    """One cache point of the view: its TTL and the estimated tokens before it."""

    ttl: CacheTtl
    prefix_tokens: int


@dataclass(frozen=True, slots=True)
class CacheExpectation:
    """The payload's ``cache``: the view's estimated tokens (the model stage's own system
    prompt not counted), the read expected, and each point in view order."""

    prompt_tokens: int
    expected_read_tokens: int
    points: tuple[ExpectedPoint, ...]

    def as_json(self) -> dict[str, object]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "expected_read_tokens": self.expected_read_tokens,
            "points": [{"ttl": p.ttl, "prefix_tokens": p.prefix_tokens} for p in self.points],
        }

    @property
    def asks_1h(self) -> bool:
        return any(point.ttl == "1h" for point in self.points)


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """An answer's ``model_usage`` as the writer stored it: Converse's ``usage`` (the
    uncached input, the cache's read and written tokens, the writes split by TTL), when
    the call was made, the command it answered, and that payload's ``cache``."""

    seq: int
    input_tokens: int
    read_tokens: int
    write_tokens: int
    written_5m: int
    written_1h: int
    answered_at: datetime | None = None
    command_id: str | None = None
    expected: CacheExpectation | None = None

    @property
    def prompt_tokens(self) -> int:
        """The whole prompt's real tokens (the model stage's system prompt included)."""
        return self.input_tokens + self.read_tokens + self.write_tokens

    @property
    def billed_units(self) -> float:
        """The input as billed, in uncached-token units."""
        return (
            PRICE_INPUT * self.input_tokens
            + PRICE_READ * self.read_tokens
            + PRICE_WRITE["5m"] * self.written_5m
            + PRICE_WRITE["1h"] * self.written_1h
        )
