"""The converse stage of Mira: one converse command in, one bounded prompt payload out.

Packages, from the top layer down (``[tool.importlinter]`` in ``pyproject.toml`` checks that
no import runs upward):

- :mod:`worker.cli` — the entry points and the wiring of one worker process.
- :mod:`worker.consumer` — the SQS receive loop, leases, settling outcomes, cohorts.
- :mod:`worker.turn` — one command's turn: the stage, wire formats, the turn's I/O, payloads.
- :mod:`worker.adapters` — aioboto3 behind :mod:`worker.ports`; :mod:`worker.settings`.
- :mod:`worker.telemetry` — metrics, traces, liveness, a turn's telemetry.
- :mod:`worker.delivery` — outcome values, micro-batching, done marks, pacing, pointers.
- :mod:`worker.ports`, :mod:`worker.logs`, :mod:`worker.timing`, :mod:`worker.errors` and
  :mod:`worker.memory` (the pure window and fold) — the foundation.
"""
