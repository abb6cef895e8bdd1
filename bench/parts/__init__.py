"""Each measured part of ``make bench``: the window and the view per call, a turn's cost
against history length, throughput, latency, the profile, the fold gap, what telemetry
costs, the model's bill and brownouts (and the scale-in wait, on its own). Each returns
figures; :mod:`bench.reports` renders them.

May import: :mod:`bench.contenders`, :mod:`bench.load`, :mod:`bench.servers`,
:mod:`bench.reports` (a part's own command line prints its section) and :mod:`worker`.
"""
