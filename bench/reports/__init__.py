"""The report writers: ``docs/BENCHMARKS.md`` and its plots, and ``docs/SCALING.md`` (the
capacity model), all from a run's figures (``docs/benchmarks/results.json``).

Imports nothing else of ``bench``: a part's figures arrive as plain values.
"""
