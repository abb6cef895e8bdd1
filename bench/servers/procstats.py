"""CPU time and memory of a process, read from ``/proc`` (Linux): no extra dependency; and
the machine a run measured on."""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

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


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(*packages: str) -> dict[str, Any]:
    """The CPU, cores, platform, Python, and the version of each of ``packages``."""

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "packages": {name: installed(name) for name in packages},
    }
