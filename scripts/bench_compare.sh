#!/usr/bin/env bash
# Reproduce docs/benchmarks/comparison/: every routing setup on two emulated workers each
# (the gateway's policies, 2 and 3 gateway replicas, vllm-router and nginx least_conn in
# front of the same fleet), one concurrency sweep, one bursty mixed-class trace and one
# load ramp per setup (about an hour on 2 cores). vllm-router comes with the bench extra
# (pip install -e '.[bench]'); nginx and redis-server are installed from Debian's packages
# when missing. A setup whose tool is still missing is skipped, and the report says so.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
exec .venv/bin/higgs-gateway bench compare --out docs/benchmarks/comparison "$@"
