#!/usr/bin/env bash
# Install the gateway with its test extras into .venv and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."

# Real tools some tests drive: Prometheus and promtool (scrape, rules, metrics checks),
# docker-compose (`config` of the compose files), kubectl (`kustomize` builds) and
# redis-server (the shared state backend).
# Installed from Debian's packages when missing and possible (root with apt-get); the
# tests themselves also install Prometheus and Redis, and skip the others with a reason otherwise.
need=()
command -v promtool >/dev/null || need+=(prometheus)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v kubectl >/dev/null || need+=(kubectl)
command -v redis-server >/dev/null || need+=(redis-server)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; } \
    || echo "warning: could not install ${need[*]}; the tests that need them will say so" >&2
fi

python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
