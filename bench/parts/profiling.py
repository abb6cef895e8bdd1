"""Where the worker's CPU goes under load: py-spy samples of the running ``worker run``
process, summarised by package (own samples) and by the worker's own functions.

py-spy samples from outside (``--nonblocking``: it never pauses the worker), so the
profiled run is the real process at full load, not an instrumented copy.
"""

from __future__ import annotations

import asyncio
import collections
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.contenders import contenders
from bench.load.traffic import draining, feed_closed_loop
from bench.load.workload import Conversation, make_commands
from bench.parts.runs import CONCURRENCY, WORK_DIR, queues
from bench.servers.servers import Servers

#: Package of a frame's file, first match wins (order matters: aiobotocore before botocore).
PACKAGES = (
    ("worker/", "worker (the stage)"),
    ("aiobotocore", "aiobotocore"),
    ("botocore", "botocore (serialize, sign, parse)"),
    ("aiohttp", "aiohttp (HTTP client)"),
    ("asyncio", "asyncio (event loop)"),
    ("selectors", "asyncio (event loop)"),
    ("structlog", "structlog (logging)"),
    ("json", "json"),
    ("pydantic", "pydantic (command parsing)"),
    ("socket", "sockets"),
)
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")


def py_spy() -> str | None:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return found if Path(found).exists() else None


def _package(file: str) -> str:
    for needle, name in PACKAGES:
        if needle in file:
            return name
    return "other"


def summarise(raw: str) -> dict[str, Any]:
    """Collapsed stacks (``frame;frame;... count``) to shares by package and function."""
    by_package: collections.Counter[str] = collections.Counter()
    worker_inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples = int(count)
        frames = stack.split(";")
        leaf = _FRAME.match(frames[-1])
        if leaf is not None and leaf.group("function") in ("select", "EpollSelector.select"):
            continue  # waiting for the network, not work
        total += samples
        by_package[_package(leaf.group("file") if leaf else "")] += samples
        seen = set()
        for frame in frames:
            match = _FRAME.match(frame)
            if match is None or "worker/" not in match.group("file"):
                continue
            if match.group("file").endswith("cli.py"):
                continue  # the entry point: everything is under it
            name = f"{match.group('function')} ({match.group('file').split('worker/', 1)[1]})"
            if name not in seen:
                seen.add(name)
                worker_inclusive[name] += samples
    if not total:
        return {"samples": 0, "by_package": {}, "worker_functions": {}}
    return {
        "samples": total,
        "by_package": {k: v / total for k, v in by_package.most_common()},
        "worker_functions": {k: v / total for k, v in worker_inclusive.most_common(12)},
    }


async def record(pid: int, seconds: float, out: Path) -> dict[str, Any] | None:
    """Sample ``pid`` for ``seconds``; None when py-spy is missing or not permitted."""
    binary = py_spy()
    if binary is None:
        return None
    command = [
        binary, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "200",
        "--nonblocking", "--format", "raw", "--output", str(out),
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, stderr = await process.communicate()
    raw = await asyncio.to_thread(_read, out)
    if process.returncode != 0 or raw is None:
        return {"error": stderr.decode(errors="replace").strip()[-300:]}
    return summarise(raw)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


async def run(
    clients: Any,
    servers: Servers,
    pool: Sequence[Conversation],
    text: Any,
    *,
    seconds: float,
    say: Callable[[str], None],
) -> dict[str, Any] | None:
    """The worker at full load (commands fed closed-loop until the sampling ends), sampled
    for ``seconds``; None when there is nothing to sample with."""
    if not seconds:
        return None
    if py_spy() is None:
        say("profile: py-spy is not installed; skipped")
        return None
    name = "profile-lat" if servers.round_trips else "profile"
    say(f"profile: py-spy on the worker for {seconds:g} s at full load"
        + (" with the latency" if servers.round_trips else ""))  # fmt: skip
    env, child = await queues(clients, servers, name)
    worker = contenders.worker(child, WORK_DIR, f"{name}-worker")
    commands = make_commands(name, pool, 5_000, text, seed=9)
    async with draining(clients.sqs, env["MODEL_QUEUE_URL"]) as drain:
        worker.start()
        feeding = asyncio.create_task(
            feed_closed_loop(clients.sqs, env["CONVERSE_QUEUE_URL"], commands, drain,
                             window=CONCURRENCY + 10)
        )  # fmt: skip
        try:
            await asyncio.sleep(2)  # past start-up
            summary = await record(worker.pid, seconds, WORK_DIR / f"{name}.raw")
        finally:
            feeding.cancel()
            await asyncio.gather(feeding, return_exceptions=True)
            await worker.stop()
    if summary is not None:
        summary["round_trips"] = servers.round_trips_ms()
    return summary
