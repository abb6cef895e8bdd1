"""The report writers: ``docs/BENCHMARKS.md`` and its plots, the parts measured with a
network round trip injected, and ``docs/SCALING.md`` (the capacity model), all from a
run's figures.
"""
