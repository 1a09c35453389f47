#!/usr/bin/env bash
# Reproduce docs/benchmarks/sessions/: voice-agent sessions on four fleets (adaptive, ll+ll,
# ht+ht through the gateway, one worker direct), a sweep over concurrent sessions and one
# barge-in each. Needs a quiet machine (it waits for a 1-minute load average below 1.5).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/higgs-gateway bench sessions --out docs/benchmarks/sessions "$@"
