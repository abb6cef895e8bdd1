"""Liveness: is the worker making progress, not merely running?

Two loops beat (:meth:`Liveness.beat`) each time they come round: the receive loop at each
long poll (SQS ends a poll within ``RECEIVE_WAIT_SECONDS``, so a worker idle on an empty
queue beats too) and the lease heartbeat at each of its beats. A beat is a float stored.
Every few seconds the worker writes the age of each loop's last beat to ``HEALTH_FILE``;
``worker health`` (the container's liveness probe) reads it and fails when a loop has been
silent past its bound, or when the file itself is that old: an event loop that is blocked
writes nothing.

Bounds: ``HEALTH_MAX_SILENCE_SECONDS`` for the receive loop; for the heartbeat, that or three
of its periods (a third of the visibility timeout each), whichever is longer.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from worker.logs import log_failure
from worker.timing import Clock, sleep_unless

RECEIVE_LOOP = "receive_loop"
LEASE_HEARTBEAT = "lease_heartbeat"
LOOPS = (RECEIVE_LOOP, LEASE_HEARTBEAT)
#: The longest the file waits between writes (a quarter of a shorter bound).
WRITE_SECONDS = 5.0
DEFAULT_HEALTH_FILE = str(Path(tempfile.gettempdir()) / "mira-converse-worker.health")


class Liveness:
    """The last beat of each loop, on the worker's clock."""

    def __init__(self, clock: Clock, max_silence: float) -> None:
        self._clock = clock
        now = clock.monotonic()
        self._last = dict.fromkeys(LOOPS, now)
        self.bounds = dict.fromkeys(LOOPS, max_silence)

    def beat(self, loop: str) -> None:
        self._last[loop] = self._clock.monotonic()

    def heartbeat_every(self, seconds: float) -> None:
        """The heartbeat's period, once known: its bound is at least three periods."""
        self.bounds[LEASE_HEARTBEAT] = max(self.bounds[RECEIVE_LOOP], 3 * seconds)

    def silences(self) -> dict[str, float]:
        now = self._clock.monotonic()
        return {loop: now - last for loop, last in self._last.items()}

    def failing(self) -> list[str]:
        """The loops silent for longer than their bound."""
        return [loop for loop, silent in self.silences().items() if silent > self.bounds[loop]]


class HealthFile:
    """Writes :class:`Liveness` to ``path`` (atomically) while the worker runs; removes it
    when the worker stops, so a stopped worker never reads as healthy."""

    def __init__(
        self,
        path: Path,
        liveness: Liveness,
        *,
        clock: Clock,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._path = path
        self._liveness = liveness
        self._clock = clock
        self._wall = wall
        self.period = min(WRITE_SECONDS, liveness.bounds[RECEIVE_LOOP] / 4)

    def write(self) -> None:
        now = self._wall()
        record = {
            "pid": os.getpid(),
            "written_at": now,
            "loops": {
                loop: {"beat_at": now - silent, "bound": self._liveness.bounds[loop]}
                for loop, silent in self._liveness.silences().items()
            },
        }
        # A new file of a name no one can guess, then renamed over the old one: the probe
        # never reads half a file, and nothing planted in a shared /tmp is written through.
        with tempfile.NamedTemporaryFile(
            "w", dir=self._path.parent, prefix=f".{self._path.name}.", delete=False
        ) as scratch:
            scratch.write(json.dumps(record))
        os.replace(scratch.name, self._path)

    async def run(self, done: asyncio.Event) -> None:
        try:
            while True:
                try:
                    self.write()
                except OSError as exc:  # a full or read-only disk: the probe will say so
                    log_failure("clerk.converse_health_write_failed", exc)
                if await sleep_unless(self._clock, done, self.period):
                    return
        finally:
            self._path.unlink(missing_ok=True)


def problems(record: Mapping[str, Any], now: float) -> list[str]:
    """What is wrong with a worker whose health file says ``record``, at ``now``; [] if
    nothing is."""
    loops: Mapping[str, Mapping[str, float]] = record["loops"]
    written_for = now - float(record["written_at"])
    found = []
    if written_for > min(float(loop["bound"]) for loop in loops.values()):
        found.append(f"the health file was last written {written_for:.0f} s ago")
    for name, loop in loops.items():
        silent, bound = now - float(loop["beat_at"]), float(loop["bound"])
        if silent > bound:
            what = name.replace("_", " ")
            found.append(f"the {what} has been silent for {silent:.0f} s (bound {bound:g} s)")
    return found


def check(path: Path, now: float) -> tuple[bool, str]:
    """``worker health``: healthy or not, and one line saying why."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        found = problems(record, now)
        ages = ", ".join(
            f"{name.replace('_', ' ')} {now - float(loop['beat_at']):.0f} s ago"
            for name, loop in record["loops"].items()
        )
    except FileNotFoundError:
        return False, f"unhealthy: no health file at {path}: the worker is not running"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, f"unhealthy: cannot read {path} ({type(exc).__name__})"
    if found:
        return False, "unhealthy: " + "; ".join(found)
    return True, f"healthy: {ages}"
