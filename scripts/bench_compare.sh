#!/usr/bin/env bash
# Reproduce docs/benchmarks/comparison/: five routing setups on two emulated workers each,
# one concurrency sweep, one bursty mixed-class trace and one load ramp per setup
# (about 30 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/higgs-gateway bench compare --out docs/benchmarks/comparison "$@"
