"""Prometheus tooling for tests: install Debian's package when missing, expand dashboard variables."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

from tests.support.debian import debian_tool

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


def _prometheus_dir() -> Path | None:
    if shutil.which("promtool") and shutil.which("prometheus"):
        return Path(shutil.which("promtool") or "").parent
    return None


def prometheus_bin() -> Path:
    """The directory with ``prometheus`` and ``promtool``, installed when missing."""
    return debian_tool(_prometheus_dir, "prometheus")


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
