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
