"""Local AWS for the tests, the benchmark and the demo (``make run``): one support package below
the tests and the benchmark.

Owns what both need to stand up and shape a local AWS endpoint: the moto server (and the
patches that make it behave as the services do where the stage depends on it), dynalite,
free ports, the TCP proxies in front of them (a fixed round trip per request, an outage,
injected error responses), the shared credentials, and the scripted stages around the
converse stage that a test and a benchmark both replay: the fold-gap model, and the model
stage answering on Bedrock's documented prompt-cache rules with Converse's ``usage``
(:mod:`~localaws.bedrock_cache`, :mod:`~localaws.model_stage`), with the answer stored as a
writer stores it, and that writer's layout of the history (:mod:`~localaws.history_writer`).
The demo (:mod:`~localaws.demo`) plays them all around the real worker.

May import :mod:`worker` (to build what the stage builds) and third-party libraries, except
that the prompt-cache stand-in never imports the stage's own model of the cache or its window
(:mod:`worker.caching`, :mod:`worker.memory`, :mod:`worker.planning`): a prediction checked
against a copy of itself proves nothing. Never :mod:`tests` or :mod:`bench`: they import it
(both rules checked by import-linter).
"""
