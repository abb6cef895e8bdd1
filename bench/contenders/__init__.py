"""The processes under measurement: the worker itself (its AWS calls counted, with or
without a tracing SDK), the naive consumer a typical user would write, and the replayed
ceiling of the stage's AWS calls.

May import: :mod:`bench.servers` and :mod:`worker`.
"""
