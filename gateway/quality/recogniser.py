"""Speech to text with PocketSphinx, from the model its wheel ships (the ``recogniser`` extra).

PocketSphinx 5's wheel carries a US English acoustic model, a general language model and the
CMU pronouncing dictionary (``pocketsphinx.get_model_path()``); the decoder is pointed at
those files explicitly, so nothing is looked up or downloaded at run time. It decodes 16 kHz
mono 16-bit PCM: the workers' 24 kHz PCM is resampled with PyAV's resampler (ffmpeg's), as
the gateway resamples for ``sample_rate``. Decoding costs CPU seconds and holds the
interpreter: it runs in the transcriber's child process (``gateway.quality.transcriber``),
never in the gateway's.

Nothing here imports PocketSphinx until a ``Recogniser`` is built, so the gateway can say the
extra is missing (``missing_extra``) without loading it.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import av

from gateway.audio.frames import PCM_LAYOUT, PCM_SAMPLE_FORMAT, frame_to_pcm, pcm_to_frame

RATE = 16000  # what the acoustic model was trained on
PACKAGES = ("pocketsphinx", "jiwer")
MISSING_EXTRA = "install the recogniser extra (pip install 'higgs-gateway[recogniser]')"


def missing_extra() -> str | None:
    """Why a word error rate cannot be measured here, or None when the extra is installed."""
    missing = [name for name in PACKAGES if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return f"quality.wer needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not installed: {MISSING_EXTRA}"


def model_files() -> dict[str, str]:
    """The acoustic model, language model and dictionary inside the installed wheel."""
    import pocketsphinx

    root = os.path.join(pocketsphinx.get_model_path(), "en-us")
    files = {
        "hmm": os.path.join(root, "en-us"),
        "lm": os.path.join(root, "en-us.lm.bin"),
        "dict": os.path.join(root, "cmudict-en-us.dict"),
    }
    for key, path in files.items():
        if not os.path.exists(path):
            raise FileNotFoundError(f"pocketsphinx's wheel has no {key} at {path}")
    return files


def to_16k(pcm: bytes) -> bytes:
    """The workers' 24 kHz mono s16le PCM at 16 kHz (an odd trailing byte is dropped)."""
    whole = pcm[: len(pcm) - len(pcm) % 2]
    if not whole:
        return b""
    resampler = av.AudioResampler(format=PCM_SAMPLE_FORMAT, layout=PCM_LAYOUT, rate=RATE)
    out = [bytes(frame_to_pcm(frame)) for frame in resampler.resample(pcm_to_frame(whole, pts=0))]
    out += [bytes(frame_to_pcm(frame)) for frame in resampler.resample(None)]
    return b"".join(out)


class Recogniser:
    """One loaded decoder (about 0.5 s and 40 MB to load): build once, transcribe many."""

    def __init__(self) -> None:
        from pocketsphinx import Decoder

        self._decoder: Any = Decoder(samprate=RATE, logfn=os.devnull, **model_files())

    def transcribe(self, pcm: bytes) -> str:
        """What the decoder hears in 24 kHz mono s16le PCM, lower case ("" for nothing)."""
        audio = to_16k(pcm)
        decoder = self._decoder
        # A fresh front end per clip: its feature state otherwise carries over from the last
        # clip, and the same clip would be heard differently depending on what came before.
        decoder.reinit_feat()
        decoder.start_utt()
        decoder.process_raw(audio, no_search=False, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        return "" if hyp is None else str(hyp.hypstr)
