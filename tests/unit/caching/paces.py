"""The paces and turn shapes the cache-lifetime tests choose from: conversations asked at
given gaps, and hypothesis strategies for any turn the policy may be given."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from worker.caching.lifetimes import Pace, PointShape, TurnShape, read_pace

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


@st.composite
def turn_shapes(draw: st.DrawFn, *, min_points: int = 0) -> TurnShape:
    """``min_points`` to three points in prefix order, each reused with any likelihood,
    sharing no more of the prefix than the last point covers."""
    prefixes = sorted(draw(st.lists(st.integers(0, 20_000), min_size=min_points, max_size=3)))
    reused = draw(st.lists(st.floats(0, 1), min_size=3, max_size=3))
    shared = draw(st.integers(0, 20_000))
    points = tuple(PointShape(p, r) for p, r in zip(prefixes, reused, strict=False))
    return TurnShape(points, min(shared, prefixes[-1] if prefixes else 0))


#: Any history of gaps between questions, up to about two days each.
gap_lists = st.lists(st.floats(0, 200_000), max_size=20)
#: The model minimums the policy meets (1: a model with none to speak of).
minimums = st.sampled_from([1, 1024, 2048, 4096])
#: Every ``HISTORY_CACHE_TTL`` setting.
ttl_settings = st.sampled_from(["adaptive", "5m", "1h"])
