"""``higgs-gateway serve --config FILE``: run the gateway under uvicorn."""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from gateway.access_log import configure_logging
from gateway.api.relay_response import quiet_stream_cuts
from gateway.app import create_app
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.log_text import wants_text
from gateway.supervisor.setup import ProfileCheckFailed


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="higgs-gateway serve", description="Run the gateway from a config file.")
    parser.add_argument("--config", help="YAML config file (HIGGS_GATEWAY_* environment variables override it)")
    parser.add_argument("--host", help="override server.host")
    parser.add_argument("--port", type=int, help="override server.port")
    parser.add_argument("--log-format", choices=["json", "text", "auto"], help="override logging.format")
    return parser


def run(config: GatewayConfig) -> int:
    configure_logging(config.logging.level, json_lines=not wants_text(config.logging.format))
    logging.getLogger("uvicorn.error").addFilter(quiet_stream_cuts)
    try:
        app = create_app(config)
    except (ProfileCheckFailed, ConfigError) as exc:
        print(f"higgs-gateway: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(
        app,
        host=config.server.host,
        port=config.server.port,
        log_config=None,
        access_log=False,  # our own JSON access log has the routing fields
        timeout_graceful_shutdown=config.server.shutdown_grace_s,
        timeout_keep_alive=config.server.keepalive_timeout_s,  # a float; 0 cuts in-flight requests at once
        lifespan="on",
    )
    return 0


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    overrides: dict[str, dict[str, object]] = {}
    if args.host:
        overrides.setdefault("server", {})["host"] = args.host
    if args.port is not None:
        overrides.setdefault("server", {})["port"] = args.port
    if args.log_format:
        overrides.setdefault("logging", {})["format"] = args.log_format
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        print(f"higgs-gateway: {exc}", file=sys.stderr)
        return 2
    return run(config)
