"""Who may call the gateway, and what a request may make a worker do."""

from gateway.security.admin import AdminAuth
from gateway.security.auth import ApiKeyAuth, KeyIdentity, hash_key
from gateway.security.errors import AuthError, RefAudioError, SecurityError
from gateway.security.ref_audio import RefAudioPolicy

__all__ = [
    "AdminAuth",
    "ApiKeyAuth",
    "AuthError",
    "KeyIdentity",
    "RefAudioError",
    "RefAudioPolicy",
    "SecurityError",
    "hash_key",
]
