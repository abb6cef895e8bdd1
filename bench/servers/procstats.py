"""CPU time and memory of a process, read from ``/proc`` (Linux): no extra dependency."""

from __future__ import annotations

import os
from dataclasses import dataclass

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class ProcSample:
    cpu_seconds: float  # user + system, all threads
    rss_bytes: int
    peak_rss_bytes: int  # VmHWM: the high-water mark of the resident set


def sample(pid: int) -> ProcSample:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    # After the command name: state is field 3, utime field 14, stime field 15 (1-based).
    cpu = (int(fields[11]) + int(fields[12])) / _TICKS
    rss = peak = 0
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
    return ProcSample(cpu_seconds=cpu, rss_bytes=rss, peak_rss_bytes=peak)


def cpu_seconds(pid: int | None) -> float:
    """CPU seconds of ``pid`` so far, 0.0 when it is gone or unknown."""
    if pid is None:
        return 0.0
    try:
        return sample(pid).cpu_seconds
    except OSError:
        return 0.0
