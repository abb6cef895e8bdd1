"""The benchmark's data and traffic: legal-matter conversations with their fold state, and
converse commands in / prompt payloads out with both queues kept shallow.

May import: :mod:`bench.servers` and :mod:`worker`.
"""
