"""The only modules that touch aioboto3/botocore. No botocore type or exception leaves them.

Owns: the SQS queue and its admin calls, the DynamoDB history store and command ledger, the S3
object store: each implements a :mod:`worker.ports` protocol and takes its client as a
constructor argument. Every request they send is built by a pure module-level function of
theirs, which the benchmark calls too. (The writer of history items, which the stage never is,
lives with the other stages' stand-ins: :mod:`localaws.history_writer`.) The clients are typed
with the ``types-aiobotocore`` stubs, a dev dependency imported only under ``TYPE_CHECKING``.

May import: :mod:`worker.delivery` (micro-batching, done marks, the pointer format),
:mod:`worker.telemetry` (the outbound trace header) and the foundation modules. Never the turn,
the consumer or the entry points (checked by import-linter).
"""
