"""What a request's ``ref_audio`` may be before it reaches a worker.

A worker fetches a ``ref_audio`` URL itself, from inside the cluster: passing client URLs
through would let anyone make workers request internal addresses (metadata services,
admin ports, other pods): SSRF. So:

* ``data:`` URIs are accepted when they are base64 audio within the size limit
  (``gateway.security.data_uri``: every cheap refusal before any decoding);
* ``http``/``https`` URLs only when their host is on ``auth.ref_audio_url_hosts``, and the
  worker gets the URL rebuilt around the canonical ASCII host the rule matched, so it
  fetches from the host that was checked, whatever its client's IDNA rules;
* ``file:`` (a worker-local path) and every other scheme never.

URLs are checked strictly rather than cleverly: credentials (``user@``), backslashes,
whitespace and control characters are refused outright, because parsers disagree about
them and the worker's parser, not ours, decides where the request goes.
"""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit, urlunsplit

from gateway.config import AuthConfig
from gateway.host_rules import HostRule, canonical_host, parse_host_rule
from gateway.security import data_uri
from gateway.security.errors import RefAudioError

MAX_URL_CHARS = 2048
DEFAULT_PORTS = {"http": 80, "https": 443}


class RefAudioPolicy:
    """``accept(value)`` returns what a worker may be given for ``value`` (a data URI
    unchanged, a URL in its canonical form), or raises ``RefAudioError``."""

    def __init__(self, config: AuthConfig) -> None:
        self._config = config
        self._rules_for: tuple[str, ...] | None = None
        self._rules: tuple[HostRule, ...] = ()

    async def accept(self, value: object) -> str:
        """``check``, with a large data URI scanned off the event loop."""
        text = _text(value)
        if _is_data_uri(text):
            await data_uri.scan_off_loop(self._split(text))
            return text
        return self._check_url(text)

    def check(self, value: object) -> str:
        """``accept`` on the calling thread, whatever the payload's size."""
        text = _text(value)
        if _is_data_uri(text):
            data_uri.scan(self._split(text))
            return text
        return self._check_url(text)

    def _split(self, value: str) -> data_uri.DataUri:
        return data_uri.split(value, self._config.ref_audio_max_bytes)

    # ---- URLs ------------------------------------------------------------------------

    def _check_url(self, url: str) -> str:
        if len(url) > MAX_URL_CHARS:
            raise RefAudioError(f"ref_audio URL is longer than {MAX_URL_CHARS} characters.")
        if any(c <= " " or c == "\x7f" or c == "\\" for c in url):
            raise RefAudioError("ref_audio URL contains whitespace, control characters or backslashes.")
        try:
            parts = urlsplit(url)  # raises on malformed IPv6 brackets ("http://[::1")
        except ValueError as exc:
            raise RefAudioError("ref_audio URL cannot be parsed.") from exc
        scheme = parts.scheme.lower()
        if scheme == "file":
            raise RefAudioError("ref_audio file: URIs are not accepted; send the audio as a data: URI.")
        if scheme not in DEFAULT_PORTS:
            raise RefAudioError("ref_audio must be a data: URI (base64 audio) or an http(s) URL.")
        if "@" in parts.netloc:
            raise RefAudioError("ref_audio URLs must not contain credentials ('user@host').")
        try:
            explicit_port = parts.port
        except ValueError as exc:
            raise RefAudioError("ref_audio URL has an invalid port.") from exc
        if explicit_port == 0:
            raise RefAudioError("ref_audio URL has an invalid port.")
        port = explicit_port or DEFAULT_PORTS[scheme]
        try:
            hostname = parts.hostname or ""
        except ValueError as exc:  # "http://[zz]/": brackets around something not an address
            raise RefAudioError("ref_audio URL has no valid host.") from exc
        host = canonical_host(hostname)
        if host is None:
            raise RefAudioError("ref_audio URL has no valid host.")
        if not any(rule.matches(host, port) for rule in self._host_rules()):
            raise RefAudioError(
                f"ref_audio URLs from {host} are not allowed (the gateway only passes URLs from "
                "hosts its operator listed); send the audio as a data: URI instead.",
                code="ref_audio_host_not_allowed",
            )
        return _canonical_url(scheme, host, explicit_port, parts)

    def _host_rules(self) -> tuple[HostRule, ...]:
        entries = tuple(self._config.ref_audio_url_hosts)
        if entries != self._rules_for:
            rules = []
            for entry in entries:
                try:
                    rules.append(parse_host_rule(entry))
                except ValueError:
                    continue  # an unusable entry allows nothing (validated at config load)
            self._rules, self._rules_for = tuple(rules), entries
        return self._rules


def _text(value: object) -> str:
    # isspace(), not strip(): no copy of a long value just to find it is not blank.
    if not isinstance(value, str) or not value or value.isspace():
        raise RefAudioError("ref_audio must be a data: URI (base64 audio) or an allowed https URL.")
    return value


def _is_data_uri(value: str) -> bool:
    return value[:5].lower() == "data:"


def _canonical_url(scheme: str, host: str, port: int | None, parts: SplitResult) -> str:
    """The URL the worker fetches: the host exactly as the rule matched it (ASCII), the port
    as a number, path and query as sent; no fragment (never sent to a server anyway)."""
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((scheme, netloc, parts.path, parts.query, ""))
