# syntax=docker/dockerfile:1
# The gateway image: the `higgs-gateway` console script and nothing else. Stateless apart
# from its data directory (voices, thresholds, drain state), which is a volume.
#
#   docker build -f docker/gateway.Dockerfile -t higgs-gateway:latest .    # from the repo root
#
# The same image runs `serve` (production), `demo` (emulated pools in one container) and
# `emulate` (one emulated worker, e.g. as a Kubernetes pod without a GPU).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY profiles ./profiles
# A wheel, so the runtime stage installs exactly what the package declares (profiles included).
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
# The `kubernetes` extra: the official client for in-cluster worker discovery; `tracing`:
# the OpenTelemetry SDK and OTLP exporters (spans are exported once tracing.endpoint is set).
RUN pip install "$(ls /wheels/higgs_gateway-*.whl)[kubernetes,tracing]" && rm -rf /wheels

# A fixed numeric uid, so Kubernetes' runAsNonRoot can verify it and volumes can be chowned to it.
RUN groupadd --system --gid 10001 higgs \
 && useradd --system --uid 10001 --gid higgs --home-dir /var/lib/higgs-gateway --shell /usr/sbin/nologin higgs \
 && mkdir -p /etc/higgs-gateway /var/lib/higgs-gateway \
 && chown higgs:higgs /var/lib/higgs-gateway
# A usable default (listen on all interfaces, data in the volume, no workers yet): mount
# your own file over it, or add workers with HIGGS_GATEWAY_* environment variables.
COPY docker/config/gateway.image.yaml /etc/higgs-gateway/gateway.yaml

USER 10001:10001
WORKDIR /var/lib/higgs-gateway
VOLUME ["/var/lib/higgs-gateway"]
EXPOSE 8000

# slim has no curl; python is there anyway. /health is liveness only (the process answers),
# so a gateway waiting for its workers is still healthy. Assumes server.port 8000.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2)"]

CMD ["higgs-gateway", "serve", "--config", "/etc/higgs-gateway/gateway.yaml"]
