#!/usr/bin/env bash
# Reproduce docs/benchmarks/first-audio/: time to first audio for every response_format x
# speed in {0.8, 1, 1.5} through the gateway, at c1 and c16, against emulated workers at
# real time; at c1 also the predicted TTFP header against the measured one.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/higgs-gateway bench first-audio --out docs/benchmarks/first-audio "$@"
