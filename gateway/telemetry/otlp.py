"""The OpenTelemetry SDK, set up from ``tracing:``: a tracer provider that batches spans
and exports them over OTLP (HTTP/protobuf or gRPC) from a background thread.

Imported only when ``tracing.endpoint`` is set: with tracing off, the SDK is never loaded.
The SDK and the exporters are the ``tracing`` extra (``pip install 'higgs-gateway[tracing]'``;
the gateway image has it). Standard ``OTEL_*`` variables the SDK reads (batch sizes,
``OTEL_RESOURCE_ATTRIBUTES``) still apply; the config's keys win where both say something.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from gateway import __version__
from gateway.config import ConfigError, TracingConfig

TRACES_PATH = "/v1/traces"
EXTRA_HINT = "pip install 'higgs-gateway[tracing]'"

try:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
except ImportError as exc:  # installed without the extra
    raise ConfigError(f"tracing.endpoint is set but the OpenTelemetry SDK is not installed ({EXTRA_HINT})") from exc


def tracer_provider(config: TracingConfig) -> TracerProvider:
    """A provider exporting to ``config.endpoint``; call ``shutdown()`` on it to flush at exit."""
    resource = Resource.create({"service.name": config.service_name, "service.version": __version__})
    # A caller's sampled flag decides for its trace; the ratio only for traces started here.
    sampler = ParentBased(TraceIdRatioBased(config.sample_ratio))
    provider = TracerProvider(resource=resource, sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(span_exporter(config)))
    return provider


def span_exporter(config: TracingConfig) -> SpanExporter:
    assert config.endpoint is not None
    headers = {name: value.get_secret_value() for name, value in config.headers.items()}
    if config.protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
        except ImportError as exc:
            raise ConfigError(f"tracing.protocol grpc needs the OTLP gRPC exporter ({EXTRA_HINT})") from exc
        secure = config.endpoint.lower().startswith("https://")
        return GrpcExporter(endpoint=config.endpoint, insecure=not secure, headers=headers or None, timeout=config.timeout_s)
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
    except ImportError as exc:
        raise ConfigError(f"tracing.protocol http/protobuf needs the OTLP HTTP exporter ({EXTRA_HINT})") from exc
    return HttpExporter(endpoint=traces_url(config.endpoint), headers=headers or None, timeout=config.timeout_s)


def traces_url(endpoint: str) -> str:
    """OTLP/HTTP's rule for a base endpoint: a URL without a path gets ``/v1/traces``."""
    return endpoint.rstrip("/") + TRACES_PATH if urlsplit(endpoint).path in ("", "/") else endpoint
