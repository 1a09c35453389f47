import pytest

from gateway.config import AuthConfig
from gateway.security.admin import AdminAuth
from gateway.security.errors import AuthError

TOKEN = "admin-token-0123456789abcdef"


@pytest.mark.parametrize("token", [None, ""])
def test_disabled_without_a_token_looks_like_no_route(token):
    admin = AdminAuth(AuthConfig(admin_token=token))
    assert not admin.enabled
    with pytest.raises(AuthError) as err:
        admin.check(f"Bearer {TOKEN}")
    assert err.value.status == 404 and "WWW-Authenticate" not in err.value.headers


@pytest.mark.parametrize(
    "header, code",
    [
        (None, "missing_admin_token"),
        ("Basic x", "missing_admin_token"),
        ("Bearer nope", "invalid_admin_token"),
        (f"Bearer {TOKEN}x", "invalid_admin_token"),
        (f"Bearer {TOKEN[:-1]}", "invalid_admin_token"),
    ],
)
def test_missing_or_wrong_token_is_401_with_challenge(header, code):
    with pytest.raises(AuthError) as err:
        AdminAuth(AuthConfig(admin_token=TOKEN)).check(header)
    assert err.value.status == 401 and err.value.code == code
    assert err.value.headers["WWW-Authenticate"].startswith('Bearer realm="admin"')
    assert TOKEN not in err.value.message


def test_right_token_passes_and_changes_apply_at_run_time():
    config = AuthConfig(admin_token=TOKEN)
    admin = AdminAuth(config)
    assert admin.check(f"Bearer {TOKEN}") is None
    config.admin_token = "rotated-token-value"
    with pytest.raises(AuthError):
        admin.check(f"Bearer {TOKEN}")
    admin.check("Bearer rotated-token-value")


def test_api_keys_are_not_admin_tokens():
    from gateway.security.auth import hash_key

    config = AuthConfig(admin_token=TOKEN, api_key_sha256=[hash_key("client-key")])
    with pytest.raises(AuthError) as err:
        AdminAuth(config).check("Bearer client-key")
    assert err.value.status == 401
