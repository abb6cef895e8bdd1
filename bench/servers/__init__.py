"""The local AWS the benchmarks run against, and what they read of a process.

Owns: the servers each in its own process (moto, dynalite and the latency proxy from
:mod:`localaws`, composed here), the in-process harness, and CPU/memory read from
``/proc``. Imports nothing else of ``bench``.
"""
