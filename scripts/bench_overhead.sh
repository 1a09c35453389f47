#!/usr/bin/env bash
# Reproduce docs/benchmarks/overhead.md: the same load direct to an emulated worker, through
# the gateway and through nginx. Installs Debian's nginx for the reference row when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nginx >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && apt-get install -y -qq nginx >/dev/null
fi
exec .venv/bin/higgs-gateway bench overhead --out docs/benchmarks "$@"
