"""The templates' outputs and resources, by the names a deployment reads them under."""

from __future__ import annotations

#: What the converse stack joins: its parameters, the pipeline stack's outputs of the same names.
JOINED = ("HistoryTableArn", "ModelQueueArn", "CompactionQueueArn")
#: Every output of the converse stack deployed without a key.
STACK_OUTPUTS = frozenset(
    {
        "ConverseQueueUrl",
        "ConverseDeadLetterQueueUrl",
        "LedgerTableName",
        "PayloadBucketName",
        "ClusterName",
        "ServiceName",
        "TaskRoleArn",
    }
)
#: Every output of the stack of the converse stage's own resources (for Kubernetes).
OWN_RESOURCES_OUTPUTS = frozenset(
    {"ConverseQueueUrl", "ConverseDeadLetterQueueUrl", "LedgerTableName", "PayloadBucketName"}
)
#: Every output of the pipeline stack: the joined ARNs, and the queues' URLs.
PIPELINE_OUTPUTS = frozenset(
    {
        *JOINED,
        "ModelQueueUrl",
        "CompactionQueueUrl",
        "ModelDeadLetterQueueUrl",
        "CompactionDeadLetterQueueUrl",
    }
)
#: The pipeline stack's resources: what the converse stack joins, and the owners' alarms.
PIPELINE_RESOURCES = frozenset(
    {
        "HistoryTable",
        "ModelQueue",
        "ModelDeadLetterQueue",
        "CompactionQueue",
        "CompactionDeadLetterQueue",
        "ModelDeadLetterAlarm",
        "CompactionDeadLetterAlarm",
    }
)
#: The variables naming the resources, as the task definition, the ConfigMap and `worker
#: bootstrap` give them to the worker.
RESOURCE_VARIABLES = (
    "CONVERSE_QUEUE_URL",
    "MODEL_QUEUE_URL",
    "COMPACTION_QUEUE_URL",
    "HISTORY_TABLE",
    "LEDGER_TABLE",
    "PAYLOAD_BUCKET",
)
#: Each queue's output -> its dead-letter queue's, over both stacks.
DEAD_LETTER_OUTPUT_OF = {
    "ConverseQueueUrl": "ConverseDeadLetterQueueUrl",
    "ModelQueueUrl": "ModelDeadLetterQueueUrl",
    "CompactionQueueUrl": "CompactionDeadLetterQueueUrl",
}
#: Every queue's output, the dead-letter queues' included, over both stacks.
QUEUE_OUTPUTS = (*DEAD_LETTER_OUTPUT_OF, *DEAD_LETTER_OUTPUT_OF.values())
