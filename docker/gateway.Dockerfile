# syntax=docker/dockerfile:1
# The gateway image: the `higgs-gateway` console script and nothing else. Stateless apart
# from its data directory (voices, thresholds, drain state), which is a volume.
#
#   docker build -f docker/gateway.Dockerfile -t higgs-gateway:0.1.0 .     # from the repo root
#
# The same image runs `serve` (production), `demo` (emulated pools in one container) and
# `emulate` (one emulated worker, e.g. as a Kubernetes pod without a GPU). Serving needs no
# speech library; the demo builds add the `emulator` extra (eSpeak NG, so the emulated
# workers speak the text) with --build-arg EXTRAS=kubernetes,tracing,emulator; a gateway
# that transcribes for a word error rate (quality.wer) adds `recogniser` the same way.
#
# Reproducible: the base by exact tag and by the digest of its multi-architecture index
# (refresh both at release: docs/deploy.md, "Pinned images"), and every Python package at
# the version docker/constraints.txt locks (scripts/lock-images.sh writes it).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY docker/constraints.txt /tmp/constraints.txt
# pip's -c for every install of this stage, the isolated build of the wheel's backend
# (setuptools, wheel) included. An ARG: set while building, absent from the image.
ARG PIP_CONSTRAINT=/tmp/constraints.txt
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
# tini as PID 1 wherever the image runs (Kubernetes has no `docker run --init`): it reaps
# the processes `demo` and the worker supervisor start and forwards SIGTERM to the gateway,
# whose graceful shutdown then runs. Preferred to the pod-level shareProcessNamespace,
# which would also let every container of the pod see the others' processes and
# environment. Debian bookworm's package (stable: only security fixes change it).
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/*
# The locked versions (pip's -c through PIP_CONSTRAINT, for the install below); kept in
# the image as the record of what it holds.
COPY docker/constraints.txt /usr/local/share/higgs-gateway/constraints.txt
ARG PIP_CONSTRAINT=/usr/local/share/higgs-gateway/constraints.txt

COPY --from=build /wheels /wheels
# The `kubernetes` extra: the asyncio client (lightkube) for in-cluster worker discovery;
# `tracing`: the OpenTelemetry SDK and OTLP exporters (used once tracing.endpoint is set);
# `emulator` (demo builds only): eSpeak NG for the emulated workers.
ARG EXTRAS=kubernetes,tracing
RUN pip install "$(ls /wheels/higgs_gateway-*.whl)[${EXTRAS}]" && rm -rf /wheels

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
# so a gateway waiting for its workers is still healthy. The port is the one the gateway
# reads from HIGGS_GATEWAY_SERVER__PORT (move it with that variable, e.g. `docker run -e
# HIGGS_GATEWAY_SERVER__PORT=9000`), else the image config's 8000.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('HIGGS_GATEWAY_SERVER__PORT', '8000'), timeout=2)"]

ENTRYPOINT ["tini", "--"]
CMD ["higgs-gateway", "serve", "--config", "/etc/higgs-gateway/gateway.yaml"]
