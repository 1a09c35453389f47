#!/usr/bin/env bash
# Reproduce the routing comparison over seeds:
#  1. the simulator over ten seeds and two text mixes (docs/benchmarks/seed-sweep/): every
#     setup of a seed in one run, the targets judged on the worst seed (an hour of one core);
#  2. the HTTP confirmation on three seeds (SEEDS, default "0 1 2"): five routing setups on
#     two emulated workers each, one concurrency sweep, one bursty mixed-class trace and one
#     load ramp per setup, every setup of a seed in one run (about 30 minutes on 2 cores per
#     seed). Seed 0 writes docs/benchmarks/comparison/, seed N docs/benchmarks/comparison/seed-N/.
# SKIP_SIMULATOR=1 or SKIP_HTTP=1 leaves a part out; other arguments go to `bench compare`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${SKIP_SIMULATOR:-}" ]; then
  .venv/bin/python -m gateway.simulator.seeds --seeds 0-9 --mixes short,long --held-out 2-9 \
    --out docs/benchmarks/seed-sweep
fi
if [ -z "${SKIP_HTTP:-}" ]; then
  for seed in ${SEEDS:-0 1 2}; do
    out=docs/benchmarks/comparison
    [ "$seed" = 0 ] || out="$out/seed-$seed"
    .venv/bin/higgs-gateway bench compare --seed "$seed" --out "$out" "$@"
  done
fi
