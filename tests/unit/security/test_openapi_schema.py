"""Security, the published schema: ``/openapi.json`` (and so ``/docs``, ``/redoc``) lists the
client API, not the admin control surface, which is documented for operators instead."""

from __future__ import annotations

from pathlib import Path

import httpx

from gateway.app import create_app
from gateway.config import load_config


async def test_admin_routes_are_not_in_the_schema_but_still_served(tmp_path: Path) -> None:
    config = load_config(
        overrides={
            "data_dir": str(tmp_path),
            "auth": {"admin_token": "schema-admin-token-01"},
            "pools": {"low_latency": {"profile": "higgs_multimodal_qwen3_low_latency.yaml", "workers": ["http://127.0.0.1:9"]}},
        }
    )
    app = create_app(config)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app.asgi), base_url="http://gw") as client:
        paths = (await client.get("/openapi.json")).json()["paths"]
        admin = await client.get("/admin/routing", headers={"Authorization": "Bearer schema-admin-token-01"})
    assert "/v1/audio/speech" in paths
    assert [path for path in paths if path.startswith("/admin")] == []
    assert admin.status_code == 200
