"""What a request's ``ref_audio`` may be before it reaches a worker.

A worker fetches a ``ref_audio`` URL itself, from inside the cluster: passing client URLs
through would let anyone make workers request internal addresses (metadata services,
admin ports, other pods): SSRF. So:

* ``data:`` URIs are accepted when they are base64 audio within the size limit;
* ``http``/``https`` URLs only when their host is on ``auth.ref_audio_url_hosts``;
* ``file:`` (a worker-local path) and every other scheme never.

URLs are checked strictly rather than cleverly: credentials (``user@``), backslashes,
whitespace and control characters are refused outright, because parsers disagree about
them and the worker's parser, not ours, decides where the request goes.
"""

from __future__ import annotations

import base64
from urllib.parse import urlsplit

from gateway.config import AuthConfig
from gateway.host_rules import HostRule, canonical_host, parse_host_rule
from gateway.security.errors import RefAudioError
from gateway.voices.probe import SUPPORTED_NAMES, sniff_format

MAX_URL_CHARS = 2048
DEFAULT_PORTS = {"http": 80, "https": 443}


class RefAudioPolicy:
    """``check(value)`` returns ``value`` unchanged if a worker may be given it."""

    def __init__(self, config: AuthConfig) -> None:
        self._config = config
        self._rules_for: tuple[str, ...] | None = None
        self._rules: tuple[HostRule, ...] = ()

    def check(self, value: object) -> str:
        if not isinstance(value, str) or not value.strip():
            raise RefAudioError("ref_audio must be a data: URI (base64 audio) or an allowed https URL.")
        head = value[:5].lower()
        if head == "data:":
            self._check_data_uri(value)
        else:
            self._check_url(value)
        return value

    # ---- data: URIs ----------------------------------------------------------------

    def _check_data_uri(self, value: str) -> None:
        header, comma, payload = value[5:].partition(",")
        params = [p.strip().lower() for p in header.split(";")]
        mime = params[0]
        if not comma or "base64" not in params[1:]:
            raise RefAudioError("ref_audio data: URIs must be base64: data:audio/wav;base64,<data>.")
        if not mime.startswith("audio/"):
            raise RefAudioError(f"ref_audio data: URI has type {mime or 'none'!r}; it must be audio/*.")
        limit = self._config.ref_audio_max_bytes
        # Judge the size before decoding: never decode an oversized payload.
        if len(payload) // 4 * 3 > limit + 3:
            raise RefAudioError(f"ref_audio is larger than {limit} bytes.", code="ref_audio_too_large")
        try:
            audio = base64.b64decode("".join(payload.split()), validate=True)
        except ValueError as exc:
            raise RefAudioError("ref_audio data: URI is not valid base64.") from exc
        if len(audio) > limit:
            raise RefAudioError(f"ref_audio is larger than {limit} bytes.", code="ref_audio_too_large")
        if sniff_format(audio) is None:
            raise RefAudioError(
                f"ref_audio data is not a recognised audio file (accepted: {SUPPORTED_NAMES})."
            )

    # ---- URLs ------------------------------------------------------------------------

    def _check_url(self, url: str) -> None:
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
            port = parts.port or DEFAULT_PORTS[scheme]
        except ValueError as exc:
            raise RefAudioError("ref_audio URL has an invalid port.") from exc
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
