"""The wheel ships every subpackage and the deploy profiles (listed by hand in pyproject); the core
install stays free of the emulator's speech library; the tree holds no built artefact."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path

import pytest

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


SPEECH_LIBRARIES = ("espeakng-loader",)


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower() for requirement in requirements}


def test_the_core_install_pulls_no_speech_library() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert not _requirement_names(project["dependencies"]) & set(SPEECH_LIBRARIES)
    assert set(SPEECH_LIBRARIES) <= _requirement_names(extras["emulator"])
    # CI (the test extra) and the README's demo install keep the emulator speaking.
    assert "higgs-gateway[emulator]" in extras["test"]
    assert "'.[emulator]'" in (ROOT / "scripts" / "demo.sh").read_text()


RECOGNISER_LIBRARIES = ("pocketsphinx", "jiwer")


def test_the_recogniser_is_an_extra_that_ci_installs() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert not _requirement_names(project["dependencies"]) & set(RECOGNISER_LIBRARIES)
    assert _requirement_names(extras["recogniser"]) == set(RECOGNISER_LIBRARIES)
    assert "higgs-gateway[recogniser]" in extras["test"]


_BLOCKED_RECOGNISER = """
import importlib, sys
sys.modules["pocketsphinx"] = None
sys.modules["jiwer"] = None
for name in sys.argv[1:]:
    importlib.import_module(name)
"""


def test_the_serving_modules_import_without_the_recogniser() -> None:
    serving = ["gateway.cli", "gateway.serve", "gateway.app", "gateway.quality.service", "gateway.quality.transcriber"]
    result = subprocess.run(
        [sys.executable, "-c", _BLOCKED_RECOGNISER, *serving], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr


# Imports the serving modules with the speech library made unimportable, then reports
# whether anything tried to load it.
_BLOCKED_IMPORT = """
import importlib, sys
sys.modules["espeakng_loader"] = None  # `import espeakng_loader` now raises ImportError
for name in sys.argv[1:]:
    importlib.import_module(name)
print(sorted(name for name in sys.modules if name.startswith("gateway.emulator")))
"""


def test_the_serving_modules_import_without_the_speech_library() -> None:
    serving = ["gateway.cli", "gateway.serve", "gateway.app", "gateway.demo"]
    result = subprocess.run(
        [sys.executable, "-c", _BLOCKED_IMPORT, *serving], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"  # nor is the emulator itself loaded by serving


# Built or binary files have no place in the tree: wheels and archives are built, not
# committed. The figures the benchmarks commit (PNG) are documentation.
_BINARY_SUFFIXES = (".whl", ".tar.gz", ".tgz", ".zip", ".egg", ".so", ".dylib", ".dll", ".exe", ".pyc", ".bin", ".onnx", ".pt")


def test_the_repository_holds_no_binary_artefact() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an installed or unpacked copy): nothing tracked to check")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    names = [name.decode() for name in tracked if name]
    assert not [name for name in names if name.lower().endswith(_BINARY_SUFFIXES)]
    for name in names:
        if name.endswith(".png") or not (ROOT / name).is_file():
            continue
        head = (ROOT / name).read_bytes()[:8192]
        assert b"\0" not in head, f"{name} looks binary"
