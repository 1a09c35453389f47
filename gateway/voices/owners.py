"""Who a voice belongs to, and the name workers and the store know it by.

Every voice has one owner: an API key (by its key id, the short digest prefix that is
safe to log) or ``admin``, the operator: voices uploaded through ``/admin/voices``, every
voice stored before voices had owners, and every voice uploaded while no keys are
configured (then ``/v1`` is open and its callers are the operator's one tenant; they
act in the admin's namespace). Each owner has its own namespace, so two keys may both
register ``narrator``.

Workers have one flat namespace, so a voice is uploaded to them (and kept on disk and in
the shared store) under its *worker name*: the admin's voices keep their own name (voices
stored before owners existed need no migration on disk, in Redis or on any worker), every
other owner's are ``_<owner>.<name>``. A client's name must start with a letter or digit,
so no name of the admin's can ever look like another owner's worker name, and an owner
id has no ``.``, so the worker name is never ambiguous.
"""

from __future__ import annotations

import re

from gateway.voices.names import NAME_PATTERN, is_valid_name

ADMIN = "admin"
# Owns no voice: the caller of an open listing (``auth.open_listings``, no key sent).
NOBODY = ""
# A key id (hex) or "admin": lower-case letters and digits only.
OWNER_PATTERN = re.compile(r"[a-z0-9]{1,32}")
WORKER_NAME_PATTERN = re.compile(rf"_(?P<owner>{OWNER_PATTERN.pattern})\.(?P<name>{NAME_PATTERN.pattern})")


def is_valid_owner(owner: object) -> bool:
    return isinstance(owner, str) and OWNER_PATTERN.fullmatch(owner) is not None


def worker_name(owner: str, name: str) -> str:
    """The name ``owner``'s voice ``name`` has on workers, on disk and in the shared store."""
    return name if owner == ADMIN else f"_{owner}.{name}"


def is_valid_worker_name(value: str) -> bool:
    """Could ``value`` name a stored voice (a directory entry, a shared-store key)?"""
    match = WORKER_NAME_PATTERN.fullmatch(value)
    return is_valid_name(value) if match is None else match["owner"] != ADMIN
