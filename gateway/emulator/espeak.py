"""eSpeak NG through ctypes, loaded from the ``espeakng-loader`` wheel (library + voice data).

The wheel is the ``emulator`` extra, never a dependency of the gateway itself: it is imported
only when an emulator starts speaking, so nothing that serves requests loads it. No system
package: the wheel ships ``libespeak-ng.so`` and ``espeak-ng-data`` and tells us
where they are. The C library keeps one global synthesiser (voice, parameters, callback),
so every render holds one lock and a caller should run renders on a single worker thread.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Protocol

import numpy as np

_AUDIO_OUTPUT_SYNCHRONOUS = 2  # render in the calling thread, samples through the callback
_INITIALIZE_DONT_EXIT = 0x8000  # report errors instead of calling exit()
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_PARAM_RATE = 1  # words per minute, 80..450
_PARAM_PITCH = 3  # base pitch, 0..100
_PARAM_RANGE = 4  # pitch range, 0..100
_OK = 0
_BUFFER_MS = 1000  # samples handed to the callback per call: fewer, larger Python calls

MIN_RATE_WPM = 80
MAX_RATE_WPM = 450
DEFAULT_RATE_WPM = 175

_SynthCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


class EspeakUnavailable(RuntimeError):
    """The library or its data could not be loaded; the caller falls back to other audio."""


class LibraryLocator(Protocol):
    """What ``espeakng_loader`` provides: where the shared library and its data live."""

    def get_library_path(self) -> str: ...

    def get_data_path(self) -> str: ...


@dataclass(frozen=True)
class EspeakVoice:
    """One eSpeak voice: a language voice plus a variant, at a base pitch and range (0..100)."""

    name: str  # e.g. "en-us+shelby"
    pitch: int = 50
    pitch_range: int = 50


# What an emulator started without the extra says (in its log and /health) before speaking
# the synthetic signal instead.
MISSING_EXTRA = (
    "the espeakng-loader package is not installed: install the emulator extra "
    "(pip install 'higgs-gateway[emulator]') to hear the text, or pass --synthetic-audio"
)


def import_locator() -> LibraryLocator:
    try:
        import espeakng_loader
    except ImportError as exc:
        raise EspeakUnavailable(MISSING_EXTRA) from exc

    locator: ModuleType = espeakng_loader
    return locator  # type: ignore[return-value]


class Espeak:
    """A loaded eSpeak NG: ``render`` turns text into 16-bit mono samples at ``sample_rate``."""

    def __init__(self, locator_factory: Callable[[], LibraryLocator] = import_locator) -> None:
        try:
            locator = locator_factory()
            self._lib = ctypes.CDLL(locator.get_library_path())
            data_path = locator.get_data_path().encode()
        except EspeakUnavailable:
            raise
        except Exception as exc:  # ImportError, OSError (missing .so), RuntimeError (no data)
            raise EspeakUnavailable(f"{type(exc).__name__}: {exc}") from exc
        lib = self._lib
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetSynthCallback.argtypes = [_SynthCallback]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [
            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
            ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
        ]  # fmt: skip
        lib.espeak_Synth.restype = ctypes.c_int
        self.sample_rate = int(lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, _BUFFER_MS, data_path, _INITIALIZE_DONT_EXIT))
        if self.sample_rate <= 0:
            raise EspeakUnavailable(f"espeak_Initialize failed ({self.sample_rate}) with data at {data_path.decode()}")
        self._lock = threading.Lock()
        self._parts: list[np.ndarray] = []
        self._callback = _SynthCallback(self._collect)  # kept referenced: C holds only the pointer
        lib.espeak_SetSynthCallback(self._callback)

    def render(self, text: str, voice: EspeakVoice, rate_wpm: int = DEFAULT_RATE_WPM) -> np.ndarray:
        """The whole utterance as int16 samples at ``sample_rate`` (blocking; CPU-bound)."""
        encoded = text.encode("utf-8") + b"\0"
        with self._lock:
            if self._lib.espeak_SetVoiceByName(voice.name.encode()) != _OK:
                raise EspeakUnavailable(f"eSpeak has no voice {voice.name!r}")
            self._lib.espeak_SetParameter(_PARAM_RATE, int(np.clip(rate_wpm, MIN_RATE_WPM, MAX_RATE_WPM)), 0)
            self._lib.espeak_SetParameter(_PARAM_PITCH, voice.pitch, 0)
            self._lib.espeak_SetParameter(_PARAM_RANGE, voice.pitch_range, 0)
            self._parts = []
            status = self._lib.espeak_Synth(encoded, len(encoded), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
            parts, self._parts = self._parts, []
        if status != _OK:
            raise RuntimeError(f"espeak_Synth failed with status {status}")
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)

    def _collect(self, wav: ctypes._Pointer[ctypes.c_short], count: int, _events: int | None) -> int:
        if count > 0 and wav:
            self._parts.append(np.ctypeslib.as_array(wav, shape=(count,)).copy())
        return 0  # 0 = keep going
