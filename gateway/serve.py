"""``higgs-gateway serve --config FILE``: run the gateway under uvicorn.

``--check`` validates the config and the deploy profiles and exits (1 on any error);
``--print-config`` prints the effective config (file + environment, secrets masked) as
YAML and exits. Neither starts a worker or opens a port. ``--processes N`` (``server.processes``)
runs N processes on one port, each a replica on the shared Redis state (``gateway.serve_processes``).
"""

from __future__ import annotations

import argparse
import gc
import logging
import socket
import sys

import uvicorn

from gateway.access_log import configure_logging
from gateway.api.http_limits import bounded_http_protocol
from gateway.api.relay_response import quiet_stream_cuts
from gateway.app import create_app
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.config_check import config_findings, config_yaml
from gateway.help_format import HelpFormatter
from gateway import serve_processes
from gateway.log_text import wants_text
from gateway.security.exposure import refuse_anonymous_exposure
from gateway.supervisor.mix import DesiredMix
from gateway.supervisor.profile_check import has_errors
from gateway.supervisor.setup import ProfileCheckFailed


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="higgs-gateway serve", description="Run the gateway from a config file.", formatter_class=HelpFormatter
    )
    parser.add_argument("--config", help="YAML config file (HIGGS_GATEWAY_* environment variables override it)")
    parser.add_argument("--host", help="override server.host")
    parser.add_argument("--port", type=int, help="override server.port")
    parser.add_argument("--log-format", choices=["json", "text", "auto"], help="override logging.format")
    parser.add_argument("--processes", type=int, help="override server.processes (several need state.backend: redis)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--check", action="store_true", help="validate the config and deploy profiles, print problems, start nothing"
    )
    action.add_argument(
        "--print-config", action="store_true", help="print the effective config (secrets masked) as YAML and exit"
    )
    return parser


def check(config: GatewayConfig, source: str) -> int:
    findings = config_findings(config)
    for finding in findings:
        print(finding, file=sys.stderr)
    if has_errors(findings):
        print(f"higgs-gateway: {source}: config check failed", file=sys.stderr)
        return 1
    print(f"{source}: ok")
    return 0


def run(config: GatewayConfig, desired_mix: DesiredMix | None = None) -> int:
    """Serve until stopped. ``desired_mix``: who decides the supervised pools' mix (None: the
    gateway's own planner), for callers that embed another judge (``bench profile-changes``)."""
    if (refusal := refuse_anonymous_exposure(config)) is not None:
        print(f"higgs-gateway: refusing to start: {refusal}", file=sys.stderr)
        return 2
    configure_logging(config.logging.level, json_lines=not wants_text(config.logging.format))
    if config.server.processes > 1:
        return serve_processes.run(config, serve_one)
    return serve_one(config, desired_mix=desired_mix)


def serve_one(config: GatewayConfig, sockets: list[socket.socket] | None = None,
              desired_mix: DesiredMix | None = None) -> int:  # fmt: skip
    """One gateway process: on its own port, or on ``sockets`` bound by the parent of several."""
    if sockets is not None:  # a fresh (spawned) process: its own logging first
        configure_logging(config.logging.level, json_lines=not wants_text(config.logging.format))
    logging.getLogger("uvicorn.error").addFilter(quiet_stream_cuts)
    try:
        app = create_app(config, desired_mix=desired_mix)
    except (ProfileCheckFailed, ConfigError) as exc:
        print(f"higgs-gateway: {exc}", file=sys.stderr)
        return 2
    server = config.server
    settle_heap()
    settings = uvicorn.Config(
        app.asgi,
        host=server.host,
        port=server.port,
        # Header size, header deadline and connection limit, enforced before the app runs.
        http=bounded_http_protocol(server.max_header_bytes, server.header_timeout_s, server.max_connections),
        log_config=None,
        access_log=False,  # our own JSON access log has the routing fields
        timeout_graceful_shutdown=server.shutdown_grace_s,
        timeout_keep_alive=server.keepalive_timeout_s,  # a float; 0 cuts in-flight requests at once
        lifespan="on",
    )
    uvicorn_server = uvicorn.Server(settings)
    try:
        uvicorn_server.run(sockets=sockets)
    except KeyboardInterrupt:
        pass
    return 0 if uvicorn_server.started else 3  # 3: uvicorn's start-up failure, as uvicorn.run exits


def settle_heap() -> None:
    """Once, after the app is built: its long-lived objects (modules, config, routes,
    schemas; about 10^5) leave the collector's view, so no collection walks them again.
    The young generation keeps CPython's threshold: raising it to 50 000 (fewer
    collections under load) let cyclic garbage pile up past the soak's memory bound."""
    gc.collect()
    gc.freeze()


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    overrides: dict[str, dict[str, object]] = {}
    if args.host:
        overrides.setdefault("server", {})["host"] = args.host
    if args.port is not None:
        overrides.setdefault("server", {})["port"] = args.port
    if args.log_format:
        overrides.setdefault("logging", {})["format"] = args.log_format
    if args.processes is not None:
        overrides.setdefault("server", {})["processes"] = args.processes
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        print(f"higgs-gateway: {exc}", file=sys.stderr)
        return 1 if args.check else 2
    if args.check:
        return check(config, args.config or "the default config")
    if args.print_config:
        sys.stdout.write(config_yaml(config))
        return 0
    return run(config)
