"""The layer contract (pyproject.toml, ``[tool.importlinter]``; docs/architecture.md, "Layers").

import-linter checks every contract: the layers of the serving gateway, the emulator,
simulator and benchmark beside it, the vocabulary importing nothing of ours, and no
import cycle between the siblings of any package. A second, independent check with
grimp (import-linter's graph library) says which top-level parts import each other.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"]


def lint(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LINT, "--config", str(config), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_every_import_contract_is_kept() -> None:
    result = lint(ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_broken_contract_fails_the_check(tmp_path: Path) -> None:
    # The same machinery must say so when a layer imports one above it: here the
    # vocabulary is declared above the HTTP layer, which imports it.
    config = tmp_path / "contracts.toml"
    config.write_text(
        '[tool.importlinter]\nroot_package = "gateway"\n\n'
        '[[tool.importlinter.contracts]]\nname = "upside down"\ntype = "layers"\n'
        'layers = ["gateway.types", "gateway.api"]\n'
    )
    result = lint(config)
    assert result.returncode != 0
    assert "gateway.api is not allowed to import gateway.types" in result.stdout


def test_no_two_parts_of_the_gateway_import_each_other() -> None:
    graph = grimp.build_graph("gateway")
    parts = sorted(m for m in graph.modules if m.count(".") == 1)
    both_ways = [
        (a, b)
        for a, b in itertools.combinations(parts, 2)
        if graph.chain_exists(importer=a, imported=b, as_packages=True)
        and graph.chain_exists(importer=b, imported=a, as_packages=True)
    ]
    assert both_ways == []


def test_the_architecture_doc_draws_the_contracts_layers() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["id"] == "layers")["layers"]
    expected = [sorted(name.removeprefix("gateway.") for name in layer.replace("|", " ").replace(":", " ").split()) for layer in layers]
    doc = (ROOT / "docs/architecture.md").read_text()
    diagram = doc.split("\n## Layers\n", 1)[1].split("```\n", 2)[1]  # the first code block
    drawn = [sorted(part.replace("|", " ").replace(":", " ").split()) for part in diagram.split("->")]
    assert drawn == expected
