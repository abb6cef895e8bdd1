"""The cache-aligned mode: where the window is anchored, how long each cache point lives, and
what Bedrock's prompt cache bills for a view.

Owns: :mod:`~worker.caching.anchor` (the cache-aligned window: an anchor kept turn to turn,
the fold-lagged summary), :mod:`~worker.caching.lifetimes` (each cache point's TTL from the
conversation's pace and the turn's shape), :mod:`~worker.caching.bill_model` (Bedrock's
documented prompt-cache rules as a price model, for ``worker window`` and the benchmark),
:mod:`~worker.caching.prices` (Bedrock's lifetimes and prices, one table),
:mod:`~worker.caching.models` (what the stage knows of its model by ``MODEL_ID``: the cache's
minimum, ``1h``, the context window a command's message must fit); and the bill,
observed, one module an idea: :mod:`~worker.caching.bills` (the payload's expectation and the
model's ``usage`` as values), :mod:`~worker.caching.expectation` (what a view expects),
:mod:`~worker.caching.calibration` (real tokens from the estimate),
:mod:`~worker.caching.history` (the cache entries the bills say were made),
:mod:`~worker.caching.diagnosis` (an answer checked, a miss's cause) and
:mod:`~worker.caching.observed` (what a turn learns from its page's bills).

Pure: plain functions over plain values, no I/O, no logging. May import :mod:`worker.memory`
only (checked by import-linter).
"""
