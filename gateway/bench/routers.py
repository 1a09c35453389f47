"""The routers people would put in front of the workers instead of the gateway, and the
load balancer in front of gateway replicas.

- nginx as a plain streaming reverse proxy: the reference point for relay overhead, the
  load balancer in front of gateway replicas, and (``least_conn``) a router in front of two
  workers.
- vLLM's own router (``vllm-router``, installed by the ``bench`` extra): it forwards
  ``POST /v1/audio/speech`` unchanged (streaming) and picks the worker by its own policy,
  knowing nothing of SLA classes or profiles.
- The relay floor (``floor_command``): the gateway's own server stack (uvicorn, httptools,
  uvloop) and its own upstream client relaying the speech route to one worker, and nothing
  else. What it costs is what any gateway written this way pays before it parses, routes,
  records or observes anything: the part of the overhead targets no routing code can win back.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


# ---- the relay floor ------------------------------------------------------------------


def floor_command(port: int, worker: str) -> list[str]:
    """The relay floor on 127.0.0.1:``port`` in front of ``worker`` (a URL)."""
    return [sys.executable, "-m", "gateway", "bench", "floor", "--port", str(port), "--worker", worker]


def floor_app(worker: str, client: Any = None) -> Any:
    """ASGI: ``/health``, and every POST relayed to ``worker`` as it is (body in, chunks out).

    ``client`` (tests): anything with ``post(url, body, headers)`` returning a response with
    ``status`` and async ``chunks()``; by default the gateway's HTTP/1.1 client, opened at
    start-up with the gateway's default ``upstream`` settings.
    """
    from gateway.config import UpstreamConfig
    from gateway.upstream.transport import http1_client

    state = {"client": client}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                state["client"] = state["client"] or http1_client(UpstreamConfig())
                await send({"type": "lifespan.startup.complete"})
            if state["client"] is not None:
                await state["client"].close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["path"] == "/health":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        response = await state["client"].post(worker + scope["path"], body, {})
        await send({"type": "http.response.start", "status": response.status, "headers": [(b"content-type", b"audio/pcm")]})
        async for chunk in response.chunks():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


def main_floor(argv: Sequence[str]) -> int:
    """``higgs-gateway bench floor``: serve the relay floor until stopped."""
    import uvicorn

    parser = argparse.ArgumentParser(prog="higgs-gateway bench floor", description=main_floor.__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--worker", required=True, help="the worker's URL")
    args = parser.parse_args(argv)
    # The gateway's own server settings (serve.py), minus its header and connection bounds.
    uvicorn.run(floor_app(args.worker.rstrip("/")), host="127.0.0.1", port=args.port, log_config=None,
                access_log=False, lifespan="on")  # fmt: skip
    return 0
