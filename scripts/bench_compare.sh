#!/usr/bin/env bash
# Reproduce docs/benchmarks/comparison/: four routing setups on two emulated workers each,
# one concurrency sweep and one bursty mixed-class trace per setup (about 15 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/higgs-gateway bench compare --out docs/benchmarks/comparison "$@"
