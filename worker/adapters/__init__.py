"""The only modules that touch aioboto3/botocore. No botocore type or exception leaves them.

Owns: the SQS queue and its admin calls, the DynamoDB history store and command ledger, the
S3 object store: each implements a :mod:`worker.ports` protocol and takes its client as a
constructor argument. Every request they send is built by a pure module-level function of
theirs, which the benchmark calls too. Also the writer of history items in the contract's
layout (:mod:`worker.adapters.history_writer`), for the demo's seed, the tests and the
benchmark. The clients are typed with the ``types-aiobotocore`` stubs, a dev dependency
imported only under ``TYPE_CHECKING``.

May import: :mod:`worker.delivery` (micro-batching, done marks, the pointer format),
:mod:`worker.telemetry` (the outbound trace header) and the foundation modules. Never the
turn, the consumer or the entry points (checked by import-linter).
"""
