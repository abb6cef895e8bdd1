"""One converse command's turn: command in, one Query, the window, the prompt out, maybe a
fold request.

Owns: :mod:`~worker.turn.stage` (the turn), :mod:`~worker.turn.commands` (the contract's wire
formats), :mod:`~worker.turn.reading` (the turn's I/O around the memory core and its log
lines), :mod:`~worker.turn.anchoring` (storing the cache-aligned window's anchor),
:mod:`~worker.turn.payloads` (bodies of any size through S3).

May import: :mod:`worker.memory`, :mod:`worker.delivery`, :mod:`worker.telemetry`,
:mod:`worker.settings` and the foundation modules; it talks to AWS only through
:mod:`worker.ports`. Never the adapters, the consumer or the entry points: the consumer
knows the turn only as its ``Stage`` port.
"""
