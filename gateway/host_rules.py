"""Host allow-list entries (``auth.ref_audio_url_hosts``): one parser, for the
configuration check at load time and for the ``ref_audio`` URL policy at request time."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

import idna

# A name may be written in Unicode (canonical_host gives its one ASCII form).
HOST_ENTRY = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s/\\:@\[\]]+)(?::(?P<port>[0-9]{1,5}))?")
DNS_NAME = re.compile(r"[a-z0-9-]{1,63}(?:\.[a-z0-9-]{1,63})*")
MAX_NAME_CHARS = 253
# WHATWG URL's "ends in a number": such a host parses (and resolves) as an IPv4 address.
NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")


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
    """The one ASCII form of a host, or None when it has none a client agrees on.

    Names go through IDNA2008 with UTS #46 mapping (the ``idna`` package), as the worker's
    HTTP client (yarl, urllib3) encodes them: "straße" is ``xn--strae-oqa``, not "strasse"
    (IDNA2003's answer, Python's ``"idna"`` codec); fullwidth letters and dots map to ASCII
    ones; characters the mapping would delete are refused. A host whose last label is a
    number is an IPv4 address in another spelling (``127.1``, ``2130706433``, ``0x7f.1``
    all resolve to 127.0.0.1) and is refused, as are IPv6 zone ids (an interface, not a host).
    """
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return None if getattr(ip, "scope_id", None) else str(ip)
    if host.isascii():
        name = host.lower()
    else:
        try:
            # UTS #46 deletes some characters (zero-width space, soft hyphen, variation
            # selectors): "e<ZWSP>vil.com" would be "evil.com". Refused, as yarl refuses them.
            if any(not c.isascii() and not idna.uts46_remap(c, std3_rules=False) for c in host):
                return None
            name = idna.encode(host, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError):
            return None
    name = name.removesuffix(".")  # "example.com." is the same DNS name
    if len(name) > MAX_NAME_CHARS or not DNS_NAME.fullmatch(name) or NUMERIC_LABEL.fullmatch(name.rsplit(".", 1)[-1]):
        return None  # "%2e", "_", empty labels and friends: not a name every resolver agrees on
    return name


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
            raise ValueError(f"not a host: {entry!r} (bad port)") from None
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
