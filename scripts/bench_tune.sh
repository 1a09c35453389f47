#!/usr/bin/env bash
# Reproduce docs/benchmarks/tune/: start one emulated worker of each profile, run
# `higgs-gateway tune` directly against them, stop them. Extra arguments go to tune.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE="${TIME_SCALE:-0.25}"
port() { .venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
LL_PORT=$(port); HT_PORT=$(port)
LOGS=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$LOGS"; }
trap cleanup EXIT
# --synthetic-audio: as in every benchmark fleet, the timings never pay for speech synthesis.
for spec in "low_latency:$LL_PORT" "high_throughput:$HT_PORT"; do
  profile="higgs_multimodal_qwen3_${spec%%:*}.yaml"
  .venv/bin/higgs-gateway emulate bosonai/higgs-audio-v3-tts-4b --omni --trust-remote-code \
    --deploy-config "$profile" --host 127.0.0.1 --port "${spec##*:}" --log-stats \
    --enable-server-load-tracking --time-scale "$SCALE" --warm --synthetic-audio --voices-dir "$LOGS/${spec%%:*}" \
    >"$LOGS/${spec%%:*}.log" 2>&1 &
  pids+=($!)
done
for p in "$LL_PORT" "$HT_PORT"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$p/health" >/dev/null && break; sleep 0.2; done
done
.venv/bin/higgs-gateway tune --ll-url "http://127.0.0.1:$LL_PORT" --ht-url "http://127.0.0.1:$HT_PORT" \
  --time-scale "$SCALE" --out docs/benchmarks/tune "$@"
