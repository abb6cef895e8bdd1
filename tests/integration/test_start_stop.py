"""A ``worker run`` stopped while it is still starting exits 0, as a running one does.

Seen on a loaded machine during rolling restarts: SIGTERM during start-up (the settings,
aioboto3 and aiohttp still importing) killed the worker by the signal (exit -15), because
the handler was installed only once the event loop ran. The test stops the worker at a
moment that is inside the slow part of start-up whatever the machine's speed: as soon as
the kernel shows a compiled extension of that part mapped into the process (pydantic's
core, loaded by the settings; aiohttp's parser, loaded with aioboto3).
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration


def mapped(pid: int, name: str) -> bool:
    """Whether a shared object whose file name starts with ``name`` is mapped in ``pid``."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False
    return any(
        Path(line.split()[-1]).name.startswith(name) for line in maps.splitlines() if "/" in line
    )


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/<pid>/maps")
@pytest.mark.parametrize("extension", ["_pydantic_core", "_http_parser"])
async def test_a_stop_during_start_up_exits_zero(stack: Stack, extension: str) -> None:
    process = await stack.worker_process("run")
    try:
        async with asyncio.timeout(60):
            while not mapped(process.pid, extension):
                assert process.returncode is None
                await asyncio.sleep(0.001)
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            _, stderr = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr.decode()
    assert b"Traceback" not in stderr
