"""``/playground``: served from the package when ``server.playground`` is on, absent otherwise."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from gateway.app import create_app
from gateway.config import GatewayConfig


def client(playground: bool) -> TestClient:
    # No `with`: the lifespan (workers, health checks) is not needed to serve static files.
    return TestClient(create_app(GatewayConfig.model_validate({"server": {"playground": playground}})))


def test_the_page_and_its_assets_are_served() -> None:
    http = client(True)
    page = http.get("/playground")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assets = re.findall(r'(?:src|href)="(/playground/[^"]+)"', page.text)
    assert sorted(assets) == ["/playground/app.js", "/playground/style.css"]
    for asset in assets:
        assert http.get(asset).status_code == 200
    assert http.get("/playground/app.js").headers["content-type"].startswith("text/javascript")


def test_the_page_loads_nothing_from_elsewhere() -> None:
    http = client(True)
    for path in ("/playground", "/playground/app.js", "/playground/style.css"):
        assert not re.search(r"https?://", http.get(path).text), f"{path} refers to another host (works offline)"


def test_unknown_files_are_an_openai_404() -> None:
    response = client(True).get("/playground/secrets.txt")
    assert response.status_code == 404
    assert response.json()["error"]["message"]


def test_off_by_default() -> None:
    assert GatewayConfig().server.playground is False
    assert client(False).get("/playground").status_code == 404
