"""``/v1/audio/voices``: one voice list for the whole fleet (filled in with the registry)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
