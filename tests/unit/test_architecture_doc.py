"""docs/architecture.md's drawing of the ASGI stack is the entry table ``create_app`` builds.

(Its layer diagram is checked against the import contracts in test_import_contracts.py.)
"""

from __future__ import annotations

from pathlib import Path

import httpx
from starlette.middleware.cors import CORSMiddleware

from gateway.api.entry import Entry
from gateway.app import create_app
from gateway.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def drawn_stack() -> tuple[list[str], list[tuple[str, str]]]:
    """The drawing's wrappers (outermost first) and its table rows (route, handler)."""
    doc = (ROOT / "docs/architecture.md").read_text()
    block = doc.split("\n## The ASGI stack", 1)[1].split("```\n", 2)[1]
    wrappers, rows = [], []
    for line in block.splitlines():
        if "->" in line:
            route, target = line.split("->", 1)
            rows.append((" ".join(route.split()), target.split()[0]))
        elif line.strip() and len(line) - len(line.lstrip()) < 4:  # not a note's continuation
            wrappers.append(line.split()[0])
    return wrappers, rows


def test_the_architecture_doc_draws_the_entry_table(tmp_path: Path) -> None:
    config = load_config(overrides={"data_dir": str(tmp_path), "server": {"cors_origins": ["https://app.example"]}})
    stack = create_app(config, control_client=httpx.AsyncClient(transport=httpx.MockTransport(lambda _: httpx.Response(500)))).asgi
    assert isinstance(stack, CORSMiddleware)
    entry = stack.app
    assert isinstance(entry, Entry)
    wrappers, rows = drawn_stack()
    assert wrappers == ["CORSMiddleware", "Entry"]
    assert rows == entry.drawing()
