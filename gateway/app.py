"""``create_app(config)``: the FastAPI application, its routes and its life cycle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from gateway import __version__
from gateway.api import admin, health, models, playground, speech, voices
from gateway.api.errors import install_error_handlers
from gateway.api.request_id import RequestIdMiddleware
from gateway.config import GatewayConfig
from gateway.runtime import Gateway


def create_app(config: GatewayConfig, gateway: Gateway | None = None) -> FastAPI:
    runtime = gateway or Gateway(config)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    app = FastAPI(
        title="Higgs-Audio gateway",
        version=__version__,
        summary="OpenAI-compatible speech API over low-latency and high-throughput vllm-omni pools.",
        lifespan=lifespan,
    )
    app.state.gateway = runtime
    install_error_handlers(app)
    for module in (speech, voices, models, health, admin):
        app.include_router(module.router)
    if config.server.playground:
        app.include_router(playground.router)
    if config.server.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=config.server.cors_origins,
            allow_methods=["GET", "POST", "DELETE", "PATCH"],
            allow_headers=["*"],
            expose_headers=["x-request-id", "x-gateway-pool", "x-gateway-route-reason"],
        )
    app.add_middleware(RequestIdMiddleware)
    return app
