"""nginx as a plain streaming reverse proxy: the reference point for relay overhead, the load
balancer in front of gateway replicas, and (``least_conn``) the router people would put in
front of two workers instead of the gateway."""

from __future__ import annotations

import shutil
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
