#!/usr/bin/env bash
# Install the gateway with its test extras into .venv and run the whole suite.
# Tests that need a real Prometheus install Debian's package themselves when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
