"""Bedrock's prompt-cache lifetimes and prices, in one place: what the stage's cache policy,
its price model, its reading of the bills and ``worker bill`` all price with.

Sources: Bedrock user guide, "Prompt caching for faster model inference"; Anthropic's pricing
page (read 0.1x, written 1.25x for the 5-minute TTL, 2x for the 1-hour one).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from worker.memory.converse import CacheTtl

#: Bedrock's cache lifetimes, in seconds; a point without a ``ttl`` lives 5 minutes.
TTL_SECONDS: Mapping[CacheTtl, float] = {"5m": 300.0, "1h": 3600.0}
#: The longest lifetime Bedrock offers: a gap longer than this leaves every entry dead.
LONGEST_TTL = timedelta(hours=1)
#: Input-token units per token: uncached, read, written for 5 minutes, written for 1 hour.
PRICE_INPUT = 1.0
PRICE_READ = 0.1
PRICE_WRITE: Mapping[CacheTtl, float] = {"5m": 1.25, "1h": 2.0}
