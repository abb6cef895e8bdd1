"""The local AWS the benchmarks run against, and what they read of a process.

Owns: the servers each in its own process (moto, dynalite and the latency proxy from
:mod:`localaws`, composed here), CPU/memory read from ``/proc`` and the machine a run
measured on. Imports nothing else of ``bench``.
"""
