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
    """One cache point of the view: its TTL, the estimated tokens before it, and that prefix's
    digest (None in an older payload's block, which carried none)."""

    ttl: CacheTtl
    prefix_tokens: int
    prefix_digest: str | None = None

    @property
    def key(self) -> str:
        """The prefix's identity: its digest; an older payload's, its estimated length."""
        return self.prefix_digest or f"tokens:{self.prefix_tokens}"

    def same_prefix(self, other: ExpectedPoint) -> bool:
        """Whether two points mark the same prefix: by digest where both carry one, else (an
        older payload's) by estimated length."""
        if self.prefix_digest is not None and other.prefix_digest is not None:
            return self.prefix_digest == other.prefix_digest
        return self.prefix_tokens == other.prefix_tokens

    def as_json(self) -> dict[str, object]:
        point: dict[str, object] = {"ttl": self.ttl, "prefix_tokens": self.prefix_tokens}
        if self.prefix_digest is not None:
            point["prefix_digest"] = self.prefix_digest
        return point


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
            "points": [point.as_json() for point in self.points],
        }

    @property
    def asks_1h(self) -> bool:
        return any(point.ttl == "1h" for point in self.points)

    def point_at(self, prefix_tokens: int) -> ExpectedPoint | None:
        """The point whose prefix holds ``prefix_tokens`` estimated tokens, if any."""
        return next((p for p in self.points if p.prefix_tokens == prefix_tokens), None)


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """An answer's ``model_usage`` as the writer stored it: Converse's ``usage`` (the
    uncached input, the cache's read and written tokens, the writes split by TTL), when
    the call was made, the command it answered, and that payload's ``cache``.

    ``details_known``: the bill carried ``cacheDetails``. Without it (a writer on a botocore
    before 1.42.31 drops it) the split of the writes is unknown: ``written_5m`` holds them
    all, priced as Bedrock's default TTL, and nothing is inferred from the split."""

    seq: int
    input_tokens: int
    read_tokens: int
    write_tokens: int
    written_5m: int
    written_1h: int
    answered_at: datetime | None = None
    command_id: str | None = None
    expected: CacheExpectation | None = None
    details_known: bool = True

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
