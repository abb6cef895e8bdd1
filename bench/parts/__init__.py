"""Each measured part of ``make bench``: the window and the view per call, a turn's cost
against history length, throughput, latency, payloads, scale-in waits, the fold gap, the
profile, and what telemetry costs. Each returns figures; :mod:`bench.reports` writes them.

May import: :mod:`bench.contenders`, :mod:`bench.load`, :mod:`bench.servers`,
:mod:`bench.reports` (a part that writes its own page) and :mod:`worker`.
"""
