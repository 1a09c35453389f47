import base64

import pytest
from pydantic import ValidationError

from gateway.config import AuthConfig
from gateway.security.errors import RefAudioError
from gateway.security.ref_audio import RefAudioPolicy
from tests.unit.voices.samples import wav_bytes

HOSTS = ["allowed.example", "media.example:8443", "*.cdn.example", "10.0.0.5", "[fd00::1]:9000", "::2"]
POLICY = RefAudioPolicy(AuthConfig(ref_audio_url_hosts=HOSTS, ref_audio_max_bytes=200_000))
WAV = wav_bytes(1.5)


def data_uri(payload: bytes, mime: str = "audio/wav") -> str:
    return f"data:{mime};base64," + base64.b64encode(payload).decode()


@pytest.mark.parametrize(
    "url, forwarded",
    [
        ("https://allowed.example/a.wav", "https://allowed.example/a.wav"),
        ("http://allowed.example:8080/a.wav?x=1#frag", "http://allowed.example:8080/a.wav?x=1"),  # bare host: any port
        ("HTTPS://ALLOWED.EXAMPLE/A.WAV", "https://allowed.example/A.WAV"),
        ("https://allowed.example./a.wav", "https://allowed.example/a.wav"),  # trailing-dot FQDN
        ("https://media.example:8443/a.wav", "https://media.example:8443/a.wav"),
        ("https://a.cdn.example/a.wav", "https://a.cdn.example/a.wav"),
        ("https://x.y.cdn.example/a.wav", "https://x.y.cdn.example/a.wav"),
        ("http://10.0.0.5/a.wav", "http://10.0.0.5/a.wav"),
        ("http://[fd00::1]:9000/a.wav", "http://[fd00::1]:9000/a.wav"),
        ("http://[0:0:0:0:0:0:0:2]/a.wav", "http://[::2]/a.wav"),  # same IPv6 address, other spelling
    ],
)
def test_allowed_urls_reach_the_worker_in_the_form_the_rule_matched(url, forwarded):
    assert POLICY.check(url) == forwarded


@pytest.mark.parametrize(
    "url, code",
    [
        ("http://allowed.example@evil.example/a.wav", "invalid_ref_audio"),  # userinfo trick
        ("http://evil.example@allowed.example/a.wav", "invalid_ref_audio"),  # credentials at all
        ("http://allowed.example%40evil.example/", "invalid_ref_audio"),
        ("http://evil.example#@allowed.example/", "ref_audio_host_not_allowed"),
        ("http://evil.example\\@allowed.example/", "invalid_ref_audio"),
        ("http://allowed.example.evil.example/a.wav", "ref_audio_host_not_allowed"),
        ("http://evilallowed.example/a.wav", "ref_audio_host_not_allowed"),
        ("https://cdn.example/a.wav", "ref_audio_host_not_allowed"),  # *.x is subdomains only
        ("https://media.example/a.wav", "ref_audio_host_not_allowed"),  # listed with a port
        ("https://media.example:8444/a.wav", "ref_audio_host_not_allowed"),
        ("http://[fd00::1]/a.wav", "ref_audio_host_not_allowed"),
        ("http://127.0.0.1/a.wav", "ref_audio_host_not_allowed"),
        ("http://169.254.169.254/latest/meta-data/", "ref_audio_host_not_allowed"),
        ("http://2130706433/", "invalid_ref_audio"),  # 127.0.0.1 as an integer
        ("http://0x0a000005/", "invalid_ref_audio"),  # 10.0.0.5 in hex
        ("http://10.0.0.5.nip.io/", "ref_audio_host_not_allowed"),
        ("http://[::ffff:10.0.0.5]/", "ref_audio_host_not_allowed"),
        ("http://allowed%2eexample/", "invalid_ref_audio"),
        ("http://allowed.example:99999/", "invalid_ref_audio"),
        ("http://allowed.example:abc/", "invalid_ref_audio"),
        ("http:///a.wav", "invalid_ref_audio"),
        ("//allowed.example/a.wav", "invalid_ref_audio"),  # scheme-relative
        ("http://allowed.example/a b.wav", "invalid_ref_audio"),
        ("http://allowed.example/\r\nHost: evil", "invalid_ref_audio"),
        ("file:///etc/passwd", "invalid_ref_audio"),
        ("FILE://allowed.example/etc/passwd", "invalid_ref_audio"),
        ("ftp://allowed.example/a.wav", "invalid_ref_audio"),
        ("gopher://allowed.example/", "invalid_ref_audio"),
        ("/srv/voices/a.wav", "invalid_ref_audio"),
        ("a.wav", "invalid_ref_audio"),
        ("https://allowed.example/" + "a" * 3000, "invalid_ref_audio"),
    ],
)
def test_refused_urls(url, code):
    with pytest.raises(RefAudioError) as err:
        POLICY.check(url)
    assert err.value.status == 400 and err.value.param == "ref_audio" and err.value.code == code


def test_no_url_is_allowed_by_default():
    with pytest.raises(RefAudioError, match="not allowed"):
        RefAudioPolicy(AuthConfig()).check("https://allowed.example/a.wav")


def test_file_uris_are_refused_even_when_the_host_is_listed():
    with pytest.raises(RefAudioError, match="file"):
        RefAudioPolicy(AuthConfig(ref_audio_url_hosts=["localhost"])).check("file://localhost/etc/passwd")


@pytest.mark.parametrize(
    "value",
    [
        data_uri(WAV),
        data_uri(WAV, "audio/x-wav"),
        "DATA:audio/wav;base64," + base64.b64encode(WAV).decode(),
        "data:audio/wav;codecs=1;base64," + base64.b64encode(WAV).decode(),
    ],
)
def test_data_uris_with_audio_are_accepted(value):
    assert RefAudioPolicy(AuthConfig()).check(value) == value


@pytest.mark.parametrize(
    "value, match",
    [
        (data_uri(WAV, "image/png"), "audio"),
        (data_uri(WAV, "text/html"), "audio"),
        ("data:audio/wav," + "A" * 100, "base64"),
        ("data:audio/wav;base64", "base64"),
        ("data:audio/wav;base64,not*base64!", "not valid base64"),
        ("data:audio/wav;base64,not*base64!!", "not valid base64"),
        # The worker takes base64 as the last parameter, spelled so, and no whitespace.
        ("data:audio/wav;BASE64," + base64.b64encode(WAV).decode(), "base64"),
        ("data:audio/wav;base64;x=1," + base64.b64encode(WAV).decode(), "base64"),
        ("data:audio/wav;base64," + base64.encodebytes(WAV).decode(), "not valid base64"),
        (data_uri(b"<script>alert(1)</script>" * 4), "not a recognised audio"),
        (data_uri(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64), "not a recognised audio"),
        (data_uri(wav_bytes(6.0)), "larger than"),
        ("", "must be"),
        (None, "must be"),
        (123, "must be"),
    ],
)
def test_bad_data_uris_are_refused(value, match):
    with pytest.raises(RefAudioError, match=match) as err:
        POLICY.check(value)
    assert err.value.param == "ref_audio"


def test_host_entries_are_validated_at_config_load():
    with pytest.raises(ValidationError, match="not a host"):
        AuthConfig(ref_audio_url_hosts=["http://bad entry/"])
