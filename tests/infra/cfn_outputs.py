"""The converse stage template's outputs, by the names a deployment reads them under."""

from __future__ import annotations

#: The output of each queue -> the output of its dead-letter queue.
DEAD_LETTER_OUTPUT_OF = {
    "ConverseQueueUrl": "ConverseDeadLetterQueueUrl",
    "ModelQueueUrl": "ModelDeadLetterQueueUrl",
    "CompactionQueueUrl": "CompactionDeadLetterQueueUrl",
}
#: Every queue's output, the dead-letter queues' included.
QUEUE_OUTPUTS = (*DEAD_LETTER_OUTPUT_OF, *DEAD_LETTER_OUTPUT_OF.values())
#: Every output of the stack deployed without a key.
STACK_OUTPUTS = frozenset(
    {*QUEUE_OUTPUTS, "HistoryTableName", "PayloadBucketName", "ClusterName", "ServiceName"}
)
