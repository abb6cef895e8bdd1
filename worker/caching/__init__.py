"""The cache-aligned mode: where the window is anchored, how long each cache point lives, and
what Bedrock's prompt cache bills for a view.

Owns: :mod:`~worker.caching.anchor` (the cache-aligned window: an anchor kept turn to turn,
the fold-lagged summary), :mod:`~worker.caching.lifetimes` (each cache point's TTL from the
conversation's pace and the turn's shape), :mod:`~worker.caching.bill_model` (Bedrock's
documented prompt-cache rules as a price model, for ``worker window`` and the benchmark).

Pure: plain functions over plain values, no I/O, no logging. May import :mod:`worker.memory`
only (checked by import-linter).
"""
