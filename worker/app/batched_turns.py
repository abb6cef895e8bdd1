"""The batch calls of one worker's turns, wired together: prompts in SendMessageBatch,
done marks in BatchWriteItem, each batch waiting for the rest of its received batch
(:mod:`worker.consumer.cohorts`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from worker.adapters.ledger import DynamoCommandLedger
from worker.adapters.sqs import BatchingSender, SqsQueue
from worker.consumer.cohorts import Cohorts
from worker.consumer.loop import Stage
from worker.delivery.done_marks import BatchingLedger
from worker.ports import CommandLedger, MessageSender, MessageSource

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_sqs import SQSClient

#: The longest a prompt waits for the rest of its received batch to reach their sends: a
#: busy worker's turns of one received batch get there tens of milliseconds apart.
PROMPT_MAX_LINGER_SECONDS = 0.1


@dataclass(frozen=True, slots=True)
class BatchedTurns:
    cohorts: Cohorts
    prompts: BatchingSender
    marks: BatchingLedger

    @property
    def model_queue(self) -> MessageSender:
        """The model queue for the stage: its sends counted, then batched."""
        return self.cohorts.sender(self.prompts)

    @property
    def ledger(self) -> CommandLedger:
        """The ledger for the stage: its done marks counted, then batched."""
        return self.cohorts.ledger(self.marks)

    def source(self, source: MessageSource) -> MessageSource:
        """The converse queue for the consumer: each receive a cohort."""
        return self.cohorts.source(source)

    def stage(self, stage: Stage) -> Stage:
        """The stage for the consumer: each turn counted from start to end."""
        return self.cohorts.stage(stage)

    async def close(self) -> None:
        """Send what is still queued (after the consumer has stopped), then stop."""
        await self.marks.close()
        await self.prompts.close()


def batched_turns(
    sqs: SQSClient, ledger: DynamoCommandLedger, *, model_queue_url: str
) -> BatchedTurns:
    cohorts = Cohorts()
    prompts = BatchingSender(
        SqsQueue(sqs, model_queue_url),
        max_linger=PROMPT_MAX_LINGER_SECONDS,
        coming=cohorts.sends_coming,
    )
    marks = BatchingLedger(ledger, coming=cohorts.marks_coming)
    cohorts.on_give_up(sends=prompts.nudge, marks=marks.nudge)
    return BatchedTurns(cohorts, prompts, marks)
