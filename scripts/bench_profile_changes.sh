#!/usr/bin/env bash
# Reproduce docs/benchmarks/profile-changes/: a GPU changing profile as the load changes, on
# two emulated workers: sustained c64 until the fleet is two high-throughput workers (against a
# static ht+ht), then low load until a low-latency worker is back (against a static adaptive
# fleet); every request counted (about 8 minutes on 2 cores, on a quiet machine).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/higgs-gateway bench profile-changes --out docs/benchmarks/profile-changes "$@"
