"""The wheel ships every subpackage and the deploy profiles (listed by hand in pyproject)."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_subpackage_is_listed() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "gateway").rglob("__init__.py")
    }
    missing = on_disk - listed
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"


def test_profiles_are_bundled() -> None:
    names = {entry.name for entry in resources.files("gateway.bundled_profiles").iterdir()}
    for profile in (ROOT / "profiles").glob("higgs_multimodal_qwen3*.yaml"):
        assert profile.name in names


def test_the_playground_ships_its_files() -> None:
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = package_data["gateway.playground"]
    shipped = {entry.name for entry in resources.files("gateway.playground").iterdir()}
    for name in ("index.html", "app.js", "style.css"):
        assert name in shipped
        assert any(Path(name).match(pattern) for pattern in patterns), f"{name} is not in package-data"
