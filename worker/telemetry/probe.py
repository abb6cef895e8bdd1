"""``worker health``: the liveness probe's side of :mod:`worker.telemetry.liveness`. It reads
the health file a running worker rewrites every few seconds and judges it, importing nothing heavy:
ECS and Kubernetes start it every 30 s beside the worker, on the worker's CPU.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RECEIVE_LOOP = "receive_loop"
LEASE_HEARTBEAT = "lease_heartbeat"
LOOPS = (RECEIVE_LOOP, LEASE_HEARTBEAT)
#: In the file of a worker still starting: when it began (wall clock).
STARTING_SINCE = "starting_since"
DEFAULT_HEALTH_FILE = str(Path(tempfile.gettempdir()) / "mira-converse-worker.telemetry.liveness")


def problems(record: Mapping[str, Any], now: float) -> list[str]:
    """What is wrong with a worker whose health file says ``record``, at ``now``; [] if
    nothing is."""
    loops: Mapping[str, Mapping[str, float]] = record["loops"]
    written_for = now - float(record["written_at"])
    found = []
    if written_for > min(float(loop["bound"]) for loop in loops.values()):
        found.append(f"the health file was last written {written_for:.0f} s ago")
    if STARTING_SINCE in record:  # the loops have not begun: their beats say nothing yet
        starting_for = now - float(record[STARTING_SINCE])
        found.append(
            f"the worker is starting: it has been checking its resources for {starting_for:.0f} s"
        )
        return found
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
