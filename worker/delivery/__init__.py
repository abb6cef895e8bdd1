"""How messages and marks leave the worker, below the turn, the consumer and the adapters.

Owns: :mod:`~worker.delivery.outcomes` (what a turn yields for its message: ``Done`` /
``Rejected`` / ``Retry``), :mod:`~worker.delivery.batching` (concurrent calls gathered into
SQS batch calls), :mod:`~worker.delivery.done_marks` (the ledger's done marks written
together), :mod:`~worker.delivery.pointers` (the Amazon SQS Extended Client's pointer format,
and message size as SQS counts it).

May import: :mod:`worker.errors`, :mod:`worker.ports`, :mod:`worker.logs`,
:mod:`worker.timing`. Nothing above (checked by import-linter).
"""
