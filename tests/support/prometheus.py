"""Prometheus tooling for tests: install Debian's package when missing, expand dashboard variables."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "dashboards"
DASHBOARD_FILES = ("gateway-overview.json", "workers.json")

# What Grafana would put in for each template variable when "All" / the default is chosen.
VARIABLE_VALUES: Mapping[str, str] = {
    "pool": ".*",
    "instance": ".*",
    "sla_class": ".*",
    "ttfp_target": "0.5",
    "__rate_interval": "30s",
    "__interval": "15s",
    "__range": "5m",
}


@functools.cache
def _install() -> str | None:
    """Path of the directory holding prometheus and promtool, installing them if needed."""
    if shutil.which("promtool") and shutil.which("prometheus"):
        return str(Path(shutil.which("promtool") or "").parent)
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for args in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "prometheus"]):
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return str(Path(shutil.which("promtool") or "/usr/bin/promtool").parent)


def prometheus_bin() -> Path:
    """The directory with ``prometheus`` and ``promtool``; skips only when apt itself is unavailable."""
    try:
        directory = _install()
    except RuntimeError as exc:  # apt exists but failed: a real problem, not a skip
        pytest.fail(str(exc))
    if directory is None:
        pytest.skip("prometheus/promtool missing and apt-get unavailable (or not root) to install them")
    return Path(directory)


def promtool(*args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(prometheus_bin() / "promtool"), *args], input=stdin, capture_output=True, text=True, cwd=cwd, timeout=120
    )


def expand(expr: str, values: Mapping[str, str] = VARIABLE_VALUES) -> str:
    """Substitute Grafana template variables (``$name`` and ``${name}``) in a PromQL expression."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise KeyError(f"no test value for dashboard variable ${name} in {expr!r}")
        return values[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def load_dashboard(name: str) -> dict:  # type: ignore[type-arg]
    return json.loads((DASHBOARDS / name).read_text())


def panel_queries(dashboard: Mapping[str, object]) -> Iterator[tuple[str, str]]:
    """(panel title, expression) for every query target of every panel, rows included."""
    stack = list(dashboard.get("panels", []))  # type: ignore[call-overload]
    while stack:
        panel = stack.pop(0)
        stack.extend(panel.get("panels", []))
        for target in panel.get("targets", []):
            yield panel.get("title", "?"), target.get("expr", "")
