"""The converse stage of Mira: one converse command in, one bounded prompt payload out.

Packages, from the top layer down (``[tool.importlinter]`` in ``pyproject.toml`` checks that
no import runs upward):

- :mod:`worker.cli` — the entry points, one module per command.
- :mod:`worker.app` — the composition root: one worker process wired from the settings, and
  the contract's resources.
- :mod:`worker.turn` — one command's turn: read, plan, send, write, log.
- :mod:`worker.settings` and :mod:`worker.adapters` (aioboto3 behind :mod:`worker.ports`).
- :mod:`worker.consumer` — the SQS receive loop, leases, settling, cohorts, brownouts, pacing.
- :mod:`worker.telemetry` — metrics, traces, liveness, a turn's telemetry hooks.
- :mod:`worker.delivery` — outcome values, micro-batching, done marks, the pointer format;
  :mod:`worker.planning` — the turn's decision, one pure function.
- :mod:`worker.ports`, :mod:`worker.logs`, :mod:`worker.timing` — interfaces, logging, time.
- :mod:`worker.errors`, :mod:`worker.events` (every log event declared once) and
  :mod:`worker.caching` (pure: the cache-aligned window, the cache lifetimes, Bedrock's
  prompt-cache bill model).
- :mod:`worker.memory` — pure: the window (trim, floor, budget), the fold trigger, the
  Converse view.
"""
