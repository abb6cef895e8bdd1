"""The paces the cache-lifetime tests choose from: conversations asked at given gaps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from worker.caching.lifetimes import Pace, read_pace

START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
BRISK = (60, 90, 45, 120, 75, 150, 60, 90, 100, 80, 70, 65)
DELIBERATE = (240, 420, 180, 600, 900, 310, 260, 720, 200, 480, 350, 250)
COLD = (4000, 5000, 7200, 3900, 4400, 6000, 8000, 4100)


def pace(*gaps: float) -> Pace:
    """The pace of questions asked ``gaps`` seconds apart, the last gap up to ``sent_at``."""
    times = [START]
    for gap in gaps:
        times.append(times[-1] + timedelta(seconds=gap))
    return read_pace(times[:-1], times[-1])
