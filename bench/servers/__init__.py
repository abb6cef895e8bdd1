"""The local AWS the benchmarks run against, and what they read of a process.

Owns: the moto server (quiet, batch-capable), dynalite for DynamoDB, the network-delay proxy,
the servers each in its own process, and CPU/memory read from ``/proc``. Imports nothing
else of ``bench``.
"""
