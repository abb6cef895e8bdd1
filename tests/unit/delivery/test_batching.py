"""The micro-batcher on virtual time: exact batches, exact lingers, one result per caller,
a clean close, a clean log context, and a task that outlives its own failures."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
import structlog

from tests.conftest import captured_logs
from tests.unit.clock import FakeClock
from worker.delivery.batching import Batcher


class Recorder:
    def __init__(
        self, clock: FakeClock, fail: set[str] | None = None, explode: bool = False
    ) -> None:
        self.batches: list[list[str]] = []
        self.sent_at: list[float] = []
        self.contexts: list[dict[str, object]] = []
        self._clock = clock
        self._fail = fail or set()
        self._explode = explode

    async def flush(self, items: Sequence[str]) -> list[str | BaseException]:
        self.batches.append(list(items))
        self.sent_at.append(self._clock.now)
        self.contexts.append(structlog.contextvars.get_contextvars())
        if self._explode:
            raise ConnectionError("endpoint down")
        return [ValueError(i) if i in self._fail else i.upper() for i in items]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def test_concurrent_submissions_leave_in_batches_of_ten(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher: Batcher[str, str] = Batcher(recorder.flush, linger=0.05, clock=clock)
    everything = asyncio.gather(*(batcher.submit(f"m{i}") for i in range(25)))
    await clock.run_until_done(everything)
    await batcher.close()
    assert everything.result() == [f"M{i}" for i in range(25)]
    assert [len(b) for b in recorder.batches] == [10, 10, 5]
    assert recorder.sent_at == [0.0, 0.0, 0.05]  # full batches at once, the rest after a linger


async def test_a_lone_item_leaves_after_one_linger(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher: Batcher[str, str] = Batcher(recorder.flush, linger=0.05, clock=clock)
    future = batcher.submit("a")
    await clock.advance(0.04)
    assert recorder.batches == []
    await clock.advance(0.01)
    assert recorder.batches == [["a"]]
    assert await future == "A"
    await batcher.close()


async def test_a_stream_of_items_waits_at_most_max_linger_after_the_first(
    clock: FakeClock,
) -> None:
    """Items 0.25 s apart keep a 0.5 s linger going; the batch leaves 2 s (max_linger)
    after its first item all the same, and the stream carries on into the next batch."""
    recorder = Recorder(clock)
    batcher: Batcher[str, str] = Batcher(recorder.flush, linger=0.5, clock=clock)
    for i in range(12):
        batcher.submit(f"m{i}")
        await clock.advance(0.25)
    await clock.advance(0.25)
    assert recorder.batches == [[f"m{i}" for i in range(8)], ["m8", "m9", "m10", "m11"]]
    assert recorder.sent_at == [2.0, 3.25]
    await batcher.close()


async def test_a_batch_never_passes_the_byte_cap(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher: Batcher[str, str] = Batcher(
        recorder.flush, linger=0.05, max_bytes=10, size=len, clock=clock
    )
    items = ["aaaa", "bbbb", "cccc", "dd", "eeeeeeeeee"]
    await clock.run_until_done(asyncio.gather(*(batcher.submit(i) for i in items)))
    await batcher.close()
    assert recorder.batches == [["aaaa", "bbbb"], ["cccc", "dd"], ["eeeeeeeeee"]]


async def test_each_caller_gets_its_own_entrys_failure(clock: FakeClock) -> None:
    batcher: Batcher[str, str] = Batcher(
        Recorder(clock, fail={"b"}).flush, linger=0.01, clock=clock
    )
    ok, failed = batcher.submit("a"), batcher.submit("b")
    await clock.advance(0.01)
    assert ok.result() == "A"
    with pytest.raises(ValueError, match="b"):
        failed.result()
    await batcher.close()


async def test_a_failed_call_fails_every_caller_in_the_batch(clock: FakeClock) -> None:
    batcher: Batcher[str, str] = Batcher(
        Recorder(clock, explode=True).flush, linger=0.01, clock=clock
    )
    futures = [batcher.submit(i) for i in "abc"]
    await clock.advance(0.01)
    for future in futures:
        with pytest.raises(ConnectionError):
            future.result()
    await batcher.close()


async def test_close_flushes_everything_submitted_before_it_without_waiting_a_linger(
    clock: FakeClock,
) -> None:
    recorder = Recorder(clock)
    batcher: Batcher[str, str] = Batcher(recorder.flush, linger=10.0, clock=clock)
    futures = [batcher.submit(i) for i in "xyz"]
    await batcher.close()
    assert [f.result() for f in futures] == ["X", "Y", "Z"]
    assert recorder.sent_at == [0.0]


async def test_the_batchers_task_does_not_keep_the_first_callers_log_context(
    clock: FakeClock,
) -> None:
    recorder = Recorder(clock)
    batcher: Batcher[str, str] = Batcher(recorder.flush, linger=0.01, clock=clock)
    with structlog.contextvars.bound_contextvars(message_id="m-first", command_id="c-first"):
        batcher.submit("a")
    with structlog.contextvars.bound_contextvars(message_id="m-second"):
        batcher.submit("b")
    await clock.advance(0.01)
    await batcher.close()
    assert recorder.batches == [["a", "b"]]
    assert recorder.contexts == [{}]


async def test_an_unexpected_failure_fails_its_batch_is_logged_by_type_and_the_task_carries_on(
    clock: FakeClock,
) -> None:
    """A flush that answers with the wrong number of results is a defect of the batcher's
    caller: that batch fails, the event names the type only, later batches still leave."""
    calls: list[list[str]] = []

    async def short_the_first(items: Sequence[str]) -> list[str]:
        calls.append(list(items))
        return [] if len(calls) == 1 else [i.upper() for i in items]

    batcher: Batcher[str, str] = Batcher(short_the_first, linger=0.01, clock=clock)
    with captured_logs() as logs:
        first = batcher.submit("a")
        await clock.advance(0.01)
        second = batcher.submit("b")
        await clock.advance(1.0)
    with pytest.raises(ValueError, match="0 results for 1 items"):
        first.result()
    assert second.result() == "B"
    [failed] = [e for e in logs if e["event"] == "clerk.converse_batcher_failed"]
    assert (failed["error_type"], failed["count"], failed["batcher"]) == (
        "ValueError",
        1,
        "batcher",
    )
    await batcher.close()


class Coming:
    """How many items are on their way, as the test says."""

    def __init__(self, count: int = 0) -> None:
        self.count = count

    def __call__(self) -> int:
        return self.count


async def test_with_nothing_on_its_way_a_lone_item_leaves_at_once(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher: Batcher[str, str] = Batcher(recorder.flush, linger=0.05, clock=clock, coming=Coming())
    future = batcher.submit("a")
    await clock.advance(0)
    assert (recorder.batches, recorder.sent_at) == ([["a"]], [0.0])
    assert await future == "A"
    await batcher.close()


async def test_a_batch_waits_for_the_items_on_their_way_beyond_the_linger(
    clock: FakeClock,
) -> None:
    """Three items known to be coming, 0.03 s apart (longer than the 0.01 s linger): the
    batch takes all three and leaves as the last arrives, not after a linger."""
    recorder = Recorder(clock)
    coming = Coming(3)
    batcher: Batcher[str, str] = Batcher(
        recorder.flush, linger=0.01, max_linger=0.5, clock=clock, coming=coming
    )
    for name in "abc":
        coming.count -= 1
        batcher.submit(name)
        await clock.advance(0.03)
    assert recorder.batches == [["a", "b", "c"]]
    assert recorder.sent_at == [pytest.approx(0.06)]
    await batcher.close()


async def test_a_nudge_sends_the_batch_when_the_item_it_waited_for_will_not_come(
    clock: FakeClock,
) -> None:
    recorder = Recorder(clock)
    coming = Coming(2)
    batcher: Batcher[str, str] = Batcher(
        recorder.flush, linger=0.01, max_linger=0.5, clock=clock, coming=coming
    )
    coming.count -= 1
    batcher.submit("a")
    await clock.advance(0.1)
    assert recorder.batches == []  # still waiting for the other one
    coming.count -= 1  # ... whose turn ended without an item
    batcher.nudge()
    await clock.advance(0)
    assert (recorder.batches, recorder.sent_at) == ([["a"]], [pytest.approx(0.1)])
    await batcher.close()


async def test_items_on_their_way_are_waited_for_at_most_max_linger(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher: Batcher[str, str] = Batcher(
        recorder.flush, linger=0.01, max_linger=0.2, clock=clock, coming=Coming(5)
    )
    batcher.submit("a")
    batcher.nudge()  # a nudge while items are still coming changes nothing
    await clock.advance(0.5)
    assert (recorder.batches, recorder.sent_at) == ([["a"]], [pytest.approx(0.2)])
    await batcher.close()


async def test_a_nudge_with_nothing_queued_does_not_stop_the_batcher(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher: Batcher[str, str] = Batcher(recorder.flush, linger=0.01, clock=clock, coming=Coming())
    batcher.submit("a")
    await clock.advance(0)
    batcher.nudge()
    await clock.advance(1)
    batcher.submit("b")
    await clock.advance(0)
    assert recorder.batches == [["a"], ["b"]]
    await batcher.close()


async def test_outstanding_counts_items_until_their_results_are_in(clock: FakeClock) -> None:
    """What a done-mark batch waits for: sends made whose results are not in yet."""
    gate = asyncio.Event()

    async def flush(items: Sequence[str]) -> list[str | BaseException]:
        await gate.wait()
        return [ValueError(i) if i == "b" else i for i in items]

    batcher: Batcher[str, str] = Batcher(flush, linger=0.01, clock=clock)
    futures = [batcher.submit(i) for i in "abc"]
    assert batcher.outstanding() == 3
    await clock.advance(0.01)
    assert batcher.outstanding() == 3  # in a batch being sent
    gate.set()
    await clock.advance(0)
    assert batcher.outstanding() == 0  # the failed entry's result is in too
    assert futures[0].result() == "a"
    with pytest.raises(ValueError, match="b"):
        futures[1].result()
    await batcher.close()
