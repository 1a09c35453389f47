#!/usr/bin/env bash
# Regenerate the images' constraints files from pyproject.toml (run after changing a
# dependency; tests/unit/test_deploy_manifests.py fails while they disagree):
#   docker/constraints.txt         the gateway image: core dependencies, the extras its
#                                  Dockerfile installs (EXTRAS, and `emulator` the demo
#                                  builds add), and the wheel's build backend
#   docker/worker-constraints.txt  the worker image: the `worker` extra's whole tree
# Resolved with uv (from PyPI, metadata only: no large wheel is downloaded) for every
# platform the images are built for (`--universal`: amd64 and arm64 alike).
set -euo pipefail
cd "$(dirname "$0")/.."

uv=${UV:-uv}
if ! command -v "$uv" >/dev/null; then
  tools=$(mktemp -d)
  trap 'rm -rf "$tools"' EXIT
  python3 -m venv "$tools" && "$tools/bin/python" -m pip install --quiet uv
  uv="$tools/bin/uv"
fi

section() {  # the requirement list at a dotted path of pyproject.toml, one per line
  python3 -c 'import sys, tomllib
value = tomllib.load(open("pyproject.toml", "rb"))
for key in sys.argv[1].split("."):
    value = value[key]
print("\n".join(value))' "$1"
}

# The gateway image: python 3.11 (its base), the extras of its EXTRAS default, the demo
# builds' `emulator` and the `recogniser` that quality.wer needs.
extras="$(sed -n 's/^ARG EXTRAS=//p' docker/gateway.Dockerfile | tr ',' ' ') emulator recogniser"
extra_args=()
for extra in $extras; do extra_args+=(--extra "$extra"); done
section build-system.requires | "$uv" pip compile --quiet pyproject.toml - "${extra_args[@]}" \
  --universal --python-version 3.11 --custom-compile-command scripts/lock-images.sh \
  -o docker/constraints.txt

# The worker image: Ubuntu 24.04's python 3.12, the `worker` extra only.
section project.optional-dependencies.worker | "$uv" pip compile --quiet - \
  --universal --python-version 3.12 --custom-compile-command scripts/lock-images.sh \
  -o docker/worker-constraints.txt
