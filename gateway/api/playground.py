"""``GET /playground``: a static page to try the gateway in a browser (no build step, no CDN).

The files ship inside the package (``gateway/playground``); the page only talks to this
gateway's own endpoints, so it works offline and needs no CORS.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from gateway.errors import GatewayError

_FILES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}


def _read(name: str) -> bytes:
    return resources.files("gateway.playground").joinpath(name).read_bytes()


def create_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/playground")
    async def playground_page() -> Response:
        return Response(_read("index.html"), media_type=_FILES["index.html"], headers=_HEADERS)

    @router.get("/playground/")
    async def playground_slash() -> RedirectResponse:
        return RedirectResponse("/playground")

    @router.get("/playground/{name}")
    async def playground_file(name: str) -> Response:
        if name not in _FILES:
            raise GatewayError(404, f"No playground file {name!r}.", code="not_found")
        return Response(_read(name), media_type=_FILES[name], headers=_HEADERS)

    return router
