"""Done marks from concurrent turns, written together.

After its prompt is sent, each turn marks its command ``done`` in the ledger and waits for
the mark before its message is deleted. The turns whose prompts left in one
SendMessageBatch resume within a loop pass of each other, so their marks reach
:class:`BatchingLedger` together and leave as one batch write (BatchWriteItem: up to 25)
instead of one write each. The order claim → send → done → delete is the same for every
command as with one write per command; what a batch changes is only how long the
``done`` write takes (a linger of a few milliseconds at most, docs/RELIABILITY.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from worker.delivery.batching import Batcher
from worker.errors import RetryableError
from worker.ports import CommandLedger, DoneMark, ForwardingLedger
from worker.timing import Clock

#: BatchWriteItem takes at most 25 requests.
MAX_WRITE_BATCH = 25
#: How long a done mark waits for the next one to join it, and at most in all. Not on the
#: prompt's path (the prompt is out), but it holds the turn's slot and delays its delete.
DONE_MARK_LINGER_SECONDS = 0.005
DONE_MARK_MAX_LINGER_SECONDS = 0.1


class BatchLedger(CommandLedger, Protocol):
    async def finish_batch(self, marks: Sequence[DoneMark]) -> Sequence[RetryableError | None]:
        """Write up to :data:`MAX_WRITE_BATCH` marks in one call: per mark, None once
        written or the error of a mark left unwritten; a failure of the call is raised."""
        ...


class BatchingLedger(ForwardingLedger):
    """A CommandLedger whose done marks leave in batches; the rest passes straight through.

    With ``coming`` (the marks still to come from the received batches already marking:
    :mod:`worker.consumer.cohorts`), a batch of marks waits for those, up to ``max_linger``, and
    leaves at once when there are none; so the marks of a received batch whose prompts
    left in two SendMessageBatch calls still go as one write. Without it, a batch waits
    ``linger`` for each next mark."""

    def __init__(
        self,
        ledger: BatchLedger,
        *,
        linger: float = DONE_MARK_LINGER_SECONDS,
        max_linger: float = DONE_MARK_MAX_LINGER_SECONDS,
        coming: Callable[[], int] | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(ledger)
        # A mark's error in the batch's results fails that mark's own future.
        self._marks: Batcher[DoneMark, None] = Batcher(
            ledger.finish_batch,
            linger=linger,
            max_linger=max_linger,
            max_items=MAX_WRITE_BATCH,
            name="done-marks",
            clock=clock,
            coming=coming,
        )

    async def finish(self, mark: DoneMark) -> None:
        """Queue the done mark and wait until it is written; raises if it was not."""
        await self._marks.submit(mark)

    def nudge(self) -> None:
        """A turn the batch may be waiting for ended without marking."""
        self._marks.nudge()

    async def close(self) -> None:
        """Write the marks still queued, then stop."""
        await self._marks.close()
