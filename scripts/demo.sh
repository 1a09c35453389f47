#!/usr/bin/env bash
# Install the gateway into .venv and start the demo: gateway + emulated pools on localhost.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet -e '.[emulator]'
exec .venv/bin/higgs-gateway demo "$@"
