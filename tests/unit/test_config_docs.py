"""README's configuration table has a row for every top-level key of the config."""

from __future__ import annotations

import re
from pathlib import Path

from gateway.config import GatewayConfig

README = Path(__file__).resolve().parents[2] / "README.md"


def documented_sections() -> set[str]:
    """Top-level keys named in the first column of the table under ``## Configuration``."""
    body = README.read_text().split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    table = body.split("| section | what |", 1)[1].split("\n\n", 1)[0]
    sections: set[str] = set()
    for row in table.splitlines()[2:]:  # past the header's rule
        first_column = row.split("|")[1]
        sections |= {name.split(".")[0] for name in re.findall(r"`([\w.]+)`", first_column)}
    return sections


def test_every_top_level_config_key_has_a_row_in_the_readme() -> None:
    assert documented_sections() == set(GatewayConfig.model_fields)
