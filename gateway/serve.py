"""``higgs-gateway serve --config FILE``: run the gateway under uvicorn.

``--check`` validates the config and the deploy profiles and exits (1 on any error);
``--print-config`` prints the effective config (file + environment, secrets masked) as
YAML and exits. Neither starts a worker or opens a port.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys

import uvicorn

from gateway.access_log import configure_logging
from gateway.api.http_limits import bounded_http_protocol
from gateway.api.relay_response import quiet_stream_cuts
from gateway.app import create_app
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.config_check import config_findings, config_yaml
from gateway.help_format import HelpFormatter
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
    logging.getLogger("uvicorn.error").addFilter(quiet_stream_cuts)
    try:
        app = create_app(config, desired_mix=desired_mix)
    except (ProfileCheckFailed, ConfigError) as exc:
        print(f"higgs-gateway: {exc}", file=sys.stderr)
        return 2
    server = config.server
    settle_heap()
    uvicorn.run(
        app.asgi,
        host=config.server.host,
        port=config.server.port,
        # Header size, header deadline and connection limit, enforced before the app runs.
        http=bounded_http_protocol(server.max_header_bytes, server.header_timeout_s, server.max_connections),
        log_config=None,
        access_log=False,  # our own JSON access log has the routing fields
        timeout_graceful_shutdown=config.server.shutdown_grace_s,
        timeout_keep_alive=config.server.keepalive_timeout_s,  # a float; 0 cuts in-flight requests at once
        lifespan="on",
    )
    return 0


# Young objects the collector lets pile up before a collection (CPython's default: 700). A
# request allocates hundreds of short-lived containers, almost all freed by reference
# counting; at 700 the collector ran several times a second under load, each time walking
# what happened to be alive, and promoted request objects into the older generations.
GC_YOUNG_THRESHOLD = 50_000


def settle_heap() -> None:
    """Once, after the app is built: its long-lived objects (modules, config, routes,
    schemas; about 10^5) leave the collector's view, so no collection walks them again,
    and collections run per tens of thousands of young objects rather than per 700."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


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
        return 1 if args.check else 2
    if args.check:
        return check(config, args.config or "the default config")
    if args.print_config:
        sys.stdout.write(config_yaml(config))
        return 0
    return run(config)
