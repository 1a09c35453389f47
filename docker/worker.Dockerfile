# syntax=docker/dockerfile:1
# One vllm-omni worker serving Higgs-Audio V3 with one of the deploy profiles in /profiles.
#
#   docker build -f docker/worker.Dockerfile -t higgs-worker:0.30.0 .     # from the repo root
#   docker run --gpus '"device=0"' --shm-size 8g -p 8091:8091 \
#     -e HIGGS_PROFILE=higgs_multimodal_qwen3_low_latency.yaml \
#     -v hf-cache:/models/huggingface higgs-worker:0.30.0
#
# Model weights are never baked in: they live in the Hugging Face cache volume, downloaded
# on first start (or pre-populated and used with HF_HUB_OFFLINE=1).
#
# The devel variant on purpose: FlashInfer JIT-compiles attention kernels with nvcc and
# Triton builds its launcher with gcc against Python.h at run time. Match the CUDA major
# version to the one the vllm wheel is built for (vllm 0.30.0 takes torch 2.13 with CUDA 13.0
# libraries: docker/worker-constraints.txt). Pinned by exact tag and by the digest of
# its multi-architecture index (refresh both at release: docs/deploy.md, "Pinned images").
ARG CUDA_IMAGE=nvidia/cuda:13.0.2-devel-ubuntu24.04@sha256:5dc1bca23d05bd37b011be68ec470c03b403a5da07ec3a86e41af9470e9d0cc6
FROM ${CUDA_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev build-essential tini ca-certificates \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/vllm
ENV PATH=/opt/vllm/bin:$PATH
# The gateway package's `worker` extra, pinned the same way: the vllm-omni wheel does not
# declare vllm, so both are named. Every package of their tree (torch, CUDA libraries,
# FlashInfer, ...) at the version docker/worker-constraints.txt locks
# (scripts/lock-images.sh resolves it from the packages' metadata).
COPY docker/worker-constraints.txt /usr/local/share/higgs-worker/constraints.txt
RUN pip install -c /usr/local/share/higgs-worker/constraints.txt "vllm-omni==0.30.0" "vllm==0.30.*"

# DeepGEMM off for both dense and MoE paths, as every Higgs worker must run.
ENV VLLM_USE_DEEP_GEMM=0 \
    VLLM_MOE_USE_DEEP_GEMM=0 \
    HF_HOME=/models/huggingface \
    HOME=/home/vllm

# The deploy profiles, also mountable over /profiles (Kubernetes does so from a ConfigMap).
COPY profiles/ /profiles/

# Non-root; torch.compile, Triton and FlashInfer caches go under $HOME/.cache.
RUN groupadd --system --gid 10001 vllm \
 && useradd --system --uid 10001 --gid vllm --create-home --home-dir /home/vllm --shell /usr/sbin/nologin vllm \
 && mkdir -p /models/huggingface \
 && chown -R vllm:vllm /models/huggingface
USER 10001:10001
VOLUME ["/models/huggingface"]
EXPOSE 8091

# Nothing answers HTTP until both stages are initialised (weights, compile, CUDA graphs):
# connection refused means "starting", so give it minutes.
HEALTHCHECK --interval=15s --timeout=5s --start-period=15m --retries=3 \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8091/health', timeout=4)"]

# The real serve command; HIGGS_PROFILE picks the deploy profile (a file in /profiles).
# Extra arguments (docker run ... ARGS, Kubernetes args:) are appended, e.g.
# --served-model-name NAME or --stage-overrides '{...}'. tini reaps the stage processes.
ENTRYPOINT ["tini", "--", "/bin/sh", "-c", "exec vllm-omni serve bosonai/higgs-audio-v3-tts-4b --omni --trust-remote-code --deploy-config \"/profiles/${HIGGS_PROFILE:?set HIGGS_PROFILE to a file in /profiles}\" --host 0.0.0.0 --port 8091 --log-stats --enable-server-load-tracking \"$@\"", "vllm-omni"]
CMD []
