"""One converse command's turn: read, plan, send, write, log.

Owns: :mod:`~worker.turn.stage` (the turn, from the received message to its outcome: the
ledger's claim, the prompt's send, the writes after it), :mod:`~worker.turn.reading` (the
history pages the plan needs), :mod:`~worker.turn.plan_log` (what the turn logs of its
plan), :mod:`~worker.turn.writing` (the writes after the prompt: the fold request's claim, send
and release, and the cache-aligned window's anchor),
:mod:`~worker.turn.commands` (the contract's wire formats), :mod:`~worker.turn.payloads`
(bodies of any size through S3). The decision itself is :func:`worker.planning.plan_turn`.

May import: :mod:`worker.planning`, :mod:`worker.memory`, :mod:`worker.caching`,
:mod:`worker.delivery`, :mod:`worker.telemetry`, :mod:`worker.settings` and the foundation
modules; it talks to AWS only through :mod:`worker.ports`. Never the adapters, the
composition root or the entry points: the consumer knows the turn only as its ``Stage``
port.
"""
