"""One host per allow-list rule: the host a ``ref_audio`` URL is checked as is the host the
worker fetches from.

The worker's HTTP client (aiohttp over yarl; vLLM parses with urllib3 first) encodes names
with IDNA2008 + UTS #46. The allow-list used Python's IDNA2003 codec, which maps "ß" to
"ss", and forwarded the URL as sent: a rule ``strasse.invalid`` let ``straße.invalid``
(``xn--strae-oqa.invalid``, another registrable domain) through. Now both sides encode the
same way and the worker gets the URL rebuilt around the ASCII host the rule matched.
"""

from __future__ import annotations

import pytest
import yarl
from pydantic import ValidationError
from urllib3.util import parse_url

from gateway.config import AuthConfig
from gateway.host_rules import canonical_host, parse_host_rule
from gateway.security.errors import RefAudioError
from gateway.security.ref_audio import RefAudioPolicy

RULES = ["strasse.invalid", "straße.example", "allowed.example", "*.cdn.example", "10.0.0.5", "[fd00::1]:9000"]


def policy(rules: list[str] = RULES) -> RefAudioPolicy:
    return RefAudioPolicy(AuthConfig(ref_audio_url_hosts=rules))


def test_a_rule_for_strasse_does_not_let_strasse_with_eszett_through() -> None:
    ascii_rule = policy(["strasse.invalid"])
    with pytest.raises(RefAudioError) as refused:
        ascii_rule.check("http://straße.invalid/a.wav")
    assert refused.value.code == "ref_audio_host_not_allowed"
    assert "xn--strae-oqa.invalid" in refused.value.message  # the host it would have reached
    assert ascii_rule.check("http://strasse.invalid/a.wav") == "http://strasse.invalid/a.wav"


@pytest.mark.parametrize(
    "url, forwarded",
    [
        ("http://straße.example/a.wav", "http://xn--strae-oqa.example/a.wav"),
        ("http://STRAßE.example/a.wav", "http://xn--strae-oqa.example/a.wav"),  # mixed case
        ("http://xn--strae-oqa.example/a.wav", "http://xn--strae-oqa.example/a.wav"),  # its ASCII form
        ("http://Allowed.EXAMPLE/A.wav", "http://allowed.example/A.wav"),
        ("http://allowed.example./a.wav", "http://allowed.example/a.wav"),  # trailing dot
        ("http://allowed。example/a.wav", "http://allowed.example/a.wav"),  # ideographic full stop
        ("http://allowed．example．/a.wav", "http://allowed.example/a.wav"),  # fullwidth dots, trailing
        ("http://ａｌｌｏｗｅｄ.example/a.wav", "http://allowed.example/a.wav"),  # fullwidth letters
        ("https://ＳＵＢ.cdn.example:8443/a?x=1#f", "https://sub.cdn.example:8443/a?x=1"),
        ("http://10.0.0.5:80/a.wav", "http://10.0.0.5:80/a.wav"),
        ("http://[FD00:0:0::1]:9000/a.wav", "http://[fd00::1]:9000/a.wav"),
    ],
)
def test_the_worker_gets_the_url_around_the_ascii_host_the_rule_matched(url: str, forwarded: str) -> None:
    assert policy().check(url) == forwarded
    # What aiohttp connects to (yarl's encoded host) and what vLLM parses (urllib3) is the
    # host that was checked: ASCII, so no client re-encodes it.
    host = canonical_host(yarl.URL(url).raw_host or "")
    assert yarl.URL(forwarded).raw_host == host
    assert parse_url(forwarded).host in (host, f"[{host}]")


@pytest.mark.parametrize(
    "url",
    [
        "http://strasse.example/a.wav",  # the rule names straße.example, another domain
        "http://allowed.example.evil/a.wav",
        "http://cdn.example/a.wav",
        "http://[::ffff:10.0.0.5]/a.wav",  # an IPv4-mapped IPv6 address is another literal
    ],
)
def test_hosts_no_rule_names_are_refused(url: str) -> None:
    with pytest.raises(RefAudioError) as refused:
        policy().check(url)
    assert refused.value.code == "ref_audio_host_not_allowed"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.1/a.wav",  # IPv4 in a short form: resolvers read it as 127.0.0.1
        "http://0x7f.1/a.wav",
        "http://2130706433/a.wav",
        "http://10.0.0.5.5/a.wav",
        "http://[fe80::1%25eth0]/a.wav",  # a zone id names an interface
        "http://allowed..example/a.wav",  # an empty label
        "http://allowed_example/a.wav",
        "http://allo\u200bwed.example/a.wav",  # UTS #46 would delete the zero-width space
        "http://allo\u00adwed.example/a.wav",  # ... and a soft hyphen
        "http://ex\u2488ample/a.wav",  # a character UTS #46 maps to "1." (a dot inside a label)
    ],
)
def test_hosts_without_one_agreed_ascii_form_are_refused(url: str) -> None:
    with pytest.raises(RefAudioError) as refused:
        policy(["*.example", "allowed.example"]).check(url)
    assert refused.value.code in ("invalid_ref_audio", "ref_audio_host_not_allowed")


@pytest.mark.parametrize("entry", ["*.0.0.1", "127.1", "0x7f.1", "bad..name", "a_b.example"])
def test_rules_without_one_host_are_refused_at_config_load(entry: str) -> None:
    with pytest.raises(ValidationError, match="not a host"):
        AuthConfig(ref_audio_url_hosts=[entry])


@pytest.mark.parametrize(
    "entry, host",
    [("straße.example", "xn--strae-oqa.example"), ("STRAẞE.example", "xn--strae-oqa.example"),
     ("*.bücher.example", "xn--bcher-kva.example"), ("Allowed.Example.", "allowed.example")],
)  # fmt: skip
def test_rules_are_canonicalised_like_urls(entry: str, host: str) -> None:
    assert parse_host_rule(entry).host == host
