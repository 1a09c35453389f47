"""The fleet planner: how many low-latency and high-throughput workers the traffic needs.

``arrivals`` counts what admission admits, per SLA class; ``sizing`` is the pure math
(curves, arrivals and objectives in, the smallest mix that meets every objective out);
``planner`` runs it in the background and publishes the answer. See docs/planner.md.
"""
