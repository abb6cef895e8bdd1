"""The micro-batcher: at most ten per batch, a byte cap, one result per caller, a clean close."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from worker.batching import Batcher


class Recorder:
    def __init__(self, fail: set[str] | None = None, explode: bool = False) -> None:
        self.batches: list[list[str]] = []
        self._fail = fail or set()
        self._explode = explode

    async def flush(self, items: Sequence[str]) -> list[str | BaseException]:
        self.batches.append(list(items))
        if self._explode:
            raise ConnectionError("endpoint down")
        return [ValueError(i) if i in self._fail else i.upper() for i in items]


async def test_concurrent_submissions_leave_in_batches_of_ten() -> None:
    recorder = Recorder()
    batcher: Batcher[str, str] = Batcher(recorder.flush, linger=0.05)
    results = await asyncio.gather(*(batcher.submit(f"m{i}") for i in range(25)))
    await batcher.close()
    assert results == [f"M{i}" for i in range(25)]
    assert [len(b) for b in recorder.batches] == [10, 10, 5]


async def test_a_batch_never_passes_the_byte_cap() -> None:
    recorder = Recorder()
    batcher: Batcher[str, str] = Batcher(recorder.flush, linger=0.05, max_bytes=10, size=len)
    items = ["aaaa", "bbbb", "cccc", "dd", "eeeeeeeeee"]
    await asyncio.gather(*(batcher.submit(i) for i in items))
    await batcher.close()
    assert recorder.batches == [["aaaa", "bbbb"], ["cccc", "dd"], ["eeeeeeeeee"]]


async def test_each_caller_gets_its_own_entrys_failure() -> None:
    batcher: Batcher[str, str] = Batcher(Recorder(fail={"b"}).flush, linger=0.01)
    ok, failed = batcher.submit("a"), batcher.submit("b")
    assert await ok == "A"
    with pytest.raises(ValueError, match="b"):
        await failed
    await batcher.close()


async def test_a_failed_call_fails_every_caller_in_the_batch() -> None:
    batcher: Batcher[str, str] = Batcher(Recorder(explode=True).flush, linger=0.01)
    futures = [batcher.submit(i) for i in "abc"]
    for future in futures:
        with pytest.raises(ConnectionError):
            await future
    await batcher.close()


async def test_close_flushes_everything_submitted_before_it() -> None:
    recorder = Recorder()
    batcher: Batcher[str, str] = Batcher(recorder.flush, linger=10.0)
    futures = [batcher.submit(i) for i in "xyz"]
    await batcher.close()
    assert [f.result() for f in futures] == ["X", "Y", "Z"]
