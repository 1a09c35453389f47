"""Voices for the whole fleet: a durable registry, fan-out to workers, name resolution."""

from gateway.voices.errors import VoiceError
from gateway.voices.names import validate_name
from gateway.voices.registry import (
    FanOutResult,
    Outcome,
    ReplayReport,
    VoiceRegistry,
    WorkerAddress,
    WorkerRef,
    WorkerResult,
)
from gateway.voices.resolve import list_voices, resolve_voice
from gateway.voices.store import Voice, VoiceStore

__all__ = [
    "FanOutResult",
    "Outcome",
    "ReplayReport",
    "Voice",
    "VoiceError",
    "VoiceRegistry",
    "VoiceStore",
    "WorkerAddress",
    "WorkerRef",
    "WorkerResult",
    "list_voices",
    "resolve_voice",
    "validate_name",
]
