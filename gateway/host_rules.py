"""Host allow-list entries (``auth.ref_audio_url_hosts``): one parser, for the
configuration check at load time and for the ``ref_audio`` URL policy at request time."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

HOST_ENTRY = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(?P<port>[0-9]{1,5}))?")


@dataclass(frozen=True, slots=True)
class HostRule:
    host: str  # lowercase ASCII name or canonical IP text; "*.x" for subdomains of x
    port: int | None  # None = any port
    wildcard: bool

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host


def canonical_host(host: str) -> str | None:
    """Lowercase ASCII form of a host (IDNA for names, canonical text for IPs), or None."""
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]  # "example.com." is the same DNS name
    if not host:
        return None
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        return None
    if not all(c.isalnum() or c in "-." for c in ascii_host):
        return None  # "%2e", "_" and friends: not a hostname any resolver agrees on
    return ascii_host


def parse_host_rule(entry: str) -> HostRule:
    """``host``, ``host:port``, ``*.domain[:port]``, ``1.2.3.4[:port]``, ``[::1][:port]``, ``::1``."""
    text = entry.strip()
    wildcard = text.startswith("*.")
    if wildcard:
        text = text[2:]
    try:
        ipaddress.ip_address(text)  # a bare IPv6 literal has colons but no port
        host_text, port = text, None
    except ValueError:
        match = HOST_ENTRY.fullmatch(text)
        if match is None:
            raise ValueError(f"not a host: {entry!r} (use host, host:port, *.domain or an IP)") from None
        host_text, port = match["host"].strip("[]"), int(match["port"]) if match["port"] else None
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"not a host: {entry!r} (bad port)")
    host = canonical_host(host_text)
    if host is None or (wildcard and _is_ip(host)):
        raise ValueError(f"not a host: {entry!r}")
    return HostRule(host, port, wildcard)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
