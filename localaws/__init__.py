"""Local AWS for the tests and the benchmark: one support package below both.

Owns what both need to stand up and shape a local AWS endpoint: the moto server (and the
patches that make it behave as the services do where the stage depends on it), dynalite,
free ports, the TCP proxies in front of them (a fixed round trip per request, an outage,
injected error responses), the shared credentials, and the scripted stages around the
converse stage that a test and a benchmark both replay (the fold-gap model).

May import :mod:`worker` (to build what the stage builds) and third-party libraries. Never
:mod:`tests` or :mod:`bench`: they import it (checked by import-linter).
"""
