"""The vocabulary of moving messages, shared below the turn, the consumer and the adapters.

Owns: the outcome values a turn yields (``Done`` / ``Rejected`` / ``Retry``), micro-batching
of concurrent calls into SQS batch calls, done marks written together, the consumer's pacing
policy, and the Amazon SQS Extended Client's pointer format with message size as SQS counts
it.

May import: :mod:`worker.errors`, :mod:`worker.ports`, :mod:`worker.logs`,
:mod:`worker.timing`, :mod:`worker.memory`. Nothing above (checked by import-linter).
"""
