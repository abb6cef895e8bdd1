"""The processes under measurement: each one its own OS process, started, sampled, stopped.

- ``worker``: the real worker (``python -m bench.contenders.worker_process``: ``worker run``
  with its calls counted), one process or two on one stack (:class:`Group`);
- ``naive``: :mod:`bench.contenders.naive_consumer`;
- ``replay``: :mod:`bench.contenders.api_replay`.

Each writes a stats snapshot (calls, CPU, peak RSS) to its own file on SIGUSR1 and on
exit; :meth:`Contender.snapshot` asks for one and waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.servers.procstats import sample

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Set to 1 in a worker's environment: its ledger grants claims without the call (a study:
#: :mod:`bench.contenders.worker_process`, :mod:`bench.parts.claim_cost`).
UNCLAIMED_ENV = "BENCH_UNCLAIMED"


@dataclass
class Contender:
    name: str
    argv: list[str]
    env: dict[str, str]
    stats_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    #: Where it runs: this checkout, or another one's (its own code and venv).
    cwd: Path = REPO_ROOT
    _seq: int = 0
    _log: Any = field(default=None, repr=False)

    def start(self) -> None:
        self.stats_path.parent.mkdir(parents=True, exist_ok=True)
        self.stats_path.unlink(missing_ok=True)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            self.argv,
            env={**self.env, "BENCH_STATS_PATH": str(self.stats_path)},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.cwd,
        )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    async def snapshot(self, within: float = 10.0) -> dict[str, Any]:
        """Ask the process for its counts (SIGUSR1) and wait for the file to show them."""
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            document = self._read()
            if document is not None and document["seq"] > self._seq:
                self._seq = document["seq"]
                document["proc"] = _proc(self.pid)
                return document
            if not self.alive():
                raise RuntimeError(f"{self.name} exited: see {self.log_path}")
            await asyncio.sleep(0.01)
        raise RuntimeError(f"{self.name} did not write its stats within {within} s")

    def _read(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self.stats_path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None

    async def stop(self, within: float = 30.0) -> dict[str, Any]:
        """SIGTERM, wait for a clean exit; returns its last snapshot, with the exit code."""
        assert self.process is not None
        peak = _proc(self.pid) if self.alive() else {}
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        process = self.process
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(process.wait, within)
        if self.alive():
            self.process.kill()
            self.process.wait()
        if self._log is not None:
            self._log.close()
        document = self._read() or {}
        document["exit_code"] = self.process.returncode
        document["proc_before_exit"] = peak
        return document

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _proc(pid: int) -> dict[str, Any]:
    try:
        s = sample(pid)
    except OSError:
        return {}
    return {
        "cpu_seconds": s.cpu_seconds,
        "rss_bytes": s.rss_bytes,
        "peak_rss_bytes": s.peak_rss_bytes,
    }


def process(
    module: str,
    env: dict[str, str],
    workdir: Path,
    name: str,
    *args: str,
    checkout: Path | None = None,
) -> Contender:
    """``python -m <module> <args>`` with ``env``, its stats and log under ``workdir``: this
    checkout's, or ``checkout``'s (run from there with its own ``.venv``)."""
    python = sys.executable if checkout is None else str(checkout / ".venv" / "bin" / "python")
    return Contender(
        name,
        [python, "-m", module, *args],
        env,
        workdir / f"{name}.stats.json",
        workdir / f"{name}.log",
        cwd=checkout or REPO_ROOT,
    )


def worker(
    env: dict[str, str], workdir: Path, name: str = "worker", *, checkout: Path | None = None
) -> Contender:
    return process("bench.contenders.worker_process", env, workdir, name, checkout=checkout)


def diff(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """Counts and CPU between two snapshots."""
    out: dict[str, Any] = {}
    for name in ("requests", "calls", "failed"):
        keys = set(after.get(name, {})) | set(before.get(name, {}))
        out[name] = {
            k: after.get(name, {}).get(k, 0) - before.get(name, {}).get(k, 0)
            for k in sorted(keys)
            if after.get(name, {}).get(k, 0) - before.get(name, {}).get(k, 0)
        }
    for name in ("query_items", "query_scanned", "query_capacity", "write_capacity", "cpu_seconds"):
        out[name] = after.get(name, 0) - before.get(name, 0)
    out["peak_rss_bytes"] = after.get("peak_rss_bytes", 0)
    return out


@dataclass
class Group:
    """Several contenders run as one (the scale-out rows: N worker processes on one stack):
    started and stopped together, their counts and CPU summed, their peak RSS the largest."""

    name: str
    members: list[Contender]

    def start(self) -> None:
        for member in self.members:
            member.start()

    async def snapshot(self, within: float = 10.0) -> dict[str, Any]:
        documents = await asyncio.gather(*(m.snapshot(within) for m in self.members))
        return merge(documents)

    async def stop(self, within: float = 30.0) -> dict[str, Any]:
        documents = await asyncio.gather(*(m.stop(within) for m in self.members))
        merged = merge(documents)
        merged["exit_code"] = next((d["exit_code"] for d in documents if d["exit_code"]), 0)
        merged["proc_before_exit"] = {
            "peak_rss_bytes": max(
                d.get("proc_before_exit", {}).get("peak_rss_bytes", 0) for d in documents
            )
        }
        return merged

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(f"[{m.name}]\n{m.log_tail(lines)}" for m in self.members)


def merge(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """Snapshots of several processes as one: counts and CPU summed, peak RSS the largest."""
    out: dict[str, Any] = {"members": len(documents)}
    for name in ("requests", "calls", "failed"):
        total: dict[str, float] = {}
        for document in documents:
            for key, n in document.get(name, {}).items():
                total[key] = total.get(key, 0) + n
        out[name] = total
    for name in ("query_items", "query_scanned", "query_capacity", "write_capacity", "cpu_seconds"):
        out[name] = sum(d.get(name, 0) for d in documents)
    out["proc"] = {
        "peak_rss_bytes": max(d.get("proc", {}).get("peak_rss_bytes", 0) for d in documents)
    }
    return out
