"""The routers people would put in front of the workers instead of the gateway, and the
load balancer in front of gateway replicas.

- nginx as a plain streaming reverse proxy: the reference point for relay overhead, the
  load balancer in front of gateway replicas, and (``least_conn``) a router in front of two
  workers.
- vLLM's own router (``vllm-router``, installed by the ``bench`` extra): it forwards
  ``POST /v1/audio/speech`` unchanged (streaming) and picks the worker by its own policy,
  knowing nothing of SLA classes or profiles.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    upstream worker {{
{servers}
        keepalive 256;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://worker;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
        }}
    }}
}}
"""


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)


def nginx_command(prefix: Path, port: int, upstream: str | Sequence[str], balance: str | None = None) -> list[str]:
    """Write a config proxying 127.0.0.1:``port`` to ``upstream`` (host:port; several: round
    robin, nginx's default, or ``balance``, e.g. ``least_conn``); its command line."""
    binary = nginx_binary()
    if binary is None:
        raise RuntimeError("nginx is not installed (Debian: apt-get install nginx)")
    prefix.mkdir(parents=True, exist_ok=True)
    conf = prefix / "nginx.conf"
    upstreams = [upstream] if isinstance(upstream, str) else list(upstream)
    lines = ([f"        {balance};"] if balance else []) + [f"        server {address};" for address in upstreams]
    conf.write_text(NGINX_CONF.format(prefix=prefix, port=port, servers="\n".join(lines)))
    return [binary, "-p", str(prefix), "-c", str(conf)]


# ---- vLLM's router ----------------------------------------------------------------------

INSTALL_HINT = "pip install -e '.[bench]'"
POLICIES = ("power_of_two", "round_robin")


def vllm_router_binary() -> str | None:
    """The console script beside this interpreter (a virtualenv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "vllm-router"
    return str(beside) if beside.exists() else shutil.which("vllm-router")


def vllm_router_command(port: int, workers: Sequence[str], policy: str, metrics_port: int) -> list[str]:
    """``vllm-router`` on 127.0.0.1:``port`` over ``workers`` (URLs) with ``policy``.

    Its defaults otherwise (retries, circuit breaker, queue), as an operator would run it;
    only the per-request log lines are turned down (they cost CPU the emulated workers
    share), and its metrics get a port of their own so two routers never collide.
    """
    if policy not in POLICIES:
        raise ValueError(f"vllm-router policy {policy!r}: one of {', '.join(POLICIES)}")
    binary = vllm_router_binary()
    if binary is None:
        raise RuntimeError(f"vllm-router is not installed ({INSTALL_HINT})")
    return [
        binary, "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *workers,
        "--policy", policy, "--log-level", "warning", "--prometheus-port", str(metrics_port),
    ]  # fmt: skip
