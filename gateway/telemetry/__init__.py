"""Following one request (or voice session) through the gateway and into the worker: request ids on log
lines (``request_context``), OpenTelemetry spans and the headers that carry them
upstream (``tracing``), and the OTLP export set up from the config (``otlp``).

A low layer: it imports the config, the shared vocabulary and OpenTelemetry's API, never
the routing, the pools or the HTTP surface (those hand it plain values).
"""
