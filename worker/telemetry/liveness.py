"""Liveness: is the worker making progress, not merely running?

Two loops beat (:meth:`Liveness.beat`) each time they come round: the receive loop at each
long poll (SQS ends a poll within ``RECEIVE_WAIT_SECONDS``, so a worker idle on an empty
queue beats too) and the lease heartbeat at each of its beats. A beat is a float stored.
Every few seconds the worker writes the age of each loop's last beat to ``HEALTH_FILE``;
``worker health`` (the container's liveness probe) reads it and fails when a loop has been
silent past its bound, or when the file itself is that old: an event loop that is blocked
writes nothing (:mod:`worker.telemetry.probe` is that reading side).

Bounds: ``HEALTH_MAX_SILENCE_SECONDS`` for the receive loop; for the heartbeat, that or three
of its periods (a third of the visibility timeout each), whichever is longer.

A worker is *starting* from its first write until the consumer runs (:meth:`Liveness.running`):
it is checking the resources it uses, and the probe fails meanwhile, whatever the loops'
beats say. The first write replaces at once a file a previous process left behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from worker.logs import log_failure
from worker.telemetry.probe import LEASE_HEARTBEAT, LOOPS, RECEIVE_LOOP, STARTING_SINCE
from worker.timing import Clock, sleep_unless

#: The longest the file waits between writes (a quarter of a shorter bound).
WRITE_SECONDS = 5.0


class Liveness:
    """The last beat of each loop, on the worker's clock."""

    def __init__(self, clock: Clock, max_silence: float) -> None:
        self._clock = clock
        now = clock.monotonic()
        self._last = dict.fromkeys(LOOPS, now)
        self._starting_since: float | None = now
        self.bounds = dict.fromkeys(LOOPS, max_silence)

    def running(self) -> None:
        """The consumer runs: the start-up is over, and each loop's silence counts from now."""
        self._starting_since = None
        self.beat(*LOOPS)

    def starting_for(self) -> float | None:
        """Seconds since the worker began starting; None once it runs."""
        if self._starting_since is None:
            return None
        return self._clock.monotonic() - self._starting_since

    def beat(self, *loops: str) -> None:
        now = self._clock.monotonic()
        for loop in loops:
            self._last[loop] = now

    def heartbeat_every(self, seconds: float) -> None:
        """The heartbeat's period, once known: its bound is at least three periods."""
        self.bounds[LEASE_HEARTBEAT] = max(self.bounds[RECEIVE_LOOP], 3 * seconds)

    def silences(self) -> dict[str, float]:
        now = self._clock.monotonic()
        return {loop: now - last for loop, last in self._last.items()}

    def failing(self) -> list[str]:
        """The loops silent for longer than their bound; none while starting (they have not
        begun: the start-up checks have a bound of their own)."""
        if self._starting_since is not None:
            return []
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
        record: dict[str, object] = {
            "pid": os.getpid(),
            "written_at": now,
            "loops": {
                loop: {"beat_at": now - silent, "bound": self._liveness.bounds[loop]}
                for loop, silent in self._liveness.silences().items()
            },
        }
        starting_for = self._liveness.starting_for()
        if starting_for is not None:
            record[STARTING_SINCE] = now - starting_for
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
