"""State every gateway replica must agree on: routing overrides, drains, voices, rate limits,
and (with Redis) every replica's in-flight work on every worker.

``local`` keeps it in the data directory (today's behaviour, one machine); ``redis`` keeps
it in one Redis that every replica reads and writes. See docs/deploy.md, "State backends".
"""
