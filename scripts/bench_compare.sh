#!/usr/bin/env bash
# Reproduce the routing comparison over seeds:
#  1. the simulator over ten seeds and two text mixes (docs/benchmarks/seed-sweep/): every
#     setup of a seed in one run, the targets judged on the worst seed (an hour of one core);
#  2. the HTTP confirmation on three seeds (SEEDS, default "0 1 2"): every routing setup on
#     two emulated workers each (the gateway's policies, 2 and 3 gateway replicas,
#     vllm-router and nginx least_conn in front of the same fleet), one concurrency sweep,
#     one bursty mixed-class trace and one load ramp per setup, every setup of a seed in one
#     run (about an hour on 2 cores per seed). Seed 0 writes docs/benchmarks/comparison/,
#     seed N docs/benchmarks/comparison/seed-N/. vllm-router comes with the bench extra
#     (pip install -e '.[bench]'); nginx and redis-server are installed from Debian's
#     packages when missing. A setup whose tool is still missing is skipped, and the report
#     says so.
# SKIP_SIMULATOR=1 or SKIP_HTTP=1 leaves a part out; other arguments go to `bench compare`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${SKIP_SIMULATOR:-}" ]; then
  .venv/bin/higgs-gateway simulate seeds --seeds 0-9 --mixes short,long --held-out 2-9 \
    --out docs/benchmarks/seed-sweep
fi
if [ -z "${SKIP_HTTP:-}" ]; then
  need=()
  command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
  command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
  if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  for seed in ${SEEDS:-0 1 2}; do
    out=docs/benchmarks/comparison
    [ "$seed" = 0 ] || out="$out/seed-$seed"
    .venv/bin/higgs-gateway bench compare --seed "$seed" --out "$out" "$@"
  done
fi
