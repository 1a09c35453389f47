"""An upper bound on a request's Stage 0 prompt, so what no worker can serve is refused up front.

The released worker length-checks the prompt only after it has answered ``200`` to a
streamed request, and then cuts the stream before any audio: to the gateway that looks
like a sick worker. So the gateway bounds the prompt itself, for every input, without a
tokenizer: Qwen3's byte-level BPE never spends more than one token per UTF-8 byte, so a
text's UTF-8 bytes bound its tokens (an emoji is 4 bytes and 2-4 tokens, a CJK character
3 bytes and 1-3 tokens, English about 4 bytes per token).

Higgs-Audio V3's prompt (vllm-omni 0.30.0
``model_executor/models/higgs_audio_v3/higgs_audio_v3_tokenizer.py`` 119-154, built by
``entrypoints/openai/tts_adapters/higgs_audio_v3.py`` 56-83):

    <|tts|> [<|ref_text|> {ref_text}] [<|ref_audio|> {clip codes}] <|text|> {input} <|audio|>

``ref_text`` is in it only with a reference clip (line 142). The clip's codes are its
codec frames (25 per second: ``models/higgs_audio_v2/configuration_higgs_audio_v2.py`` 63,
72, 8 codebooks at ``frame_rate`` 25) plus 7 rows of the 8-codebook delay pattern
(``apply_delay_pattern``, tokenizer lines 46-61). An uploaded voice is a reference clip with
its stored ``ref_text`` unless the request sends one (``serving_speech.py``
``_apply_uploaded_speaker`` 749-804); the worker takes clips of at most 30 s
(``serving_speech.py`` 110), so a clip the gateway has not measured counts as 30 s (an
inline WAV is measured from its header when 30 s would not fit).

vLLM refuses a prompt of ``max_model_len`` tokens or more (vllm 0.30.0
``v1/engine/input_processor.py`` 440-485) and stops generating when prompt plus output
reach it (``v1/core/sched/utils.py`` ``check_stop``), so what is left for audio is
``max_model_len`` minus the prompt; the gateway asks for at least ``MIN_AUDIO_TOKENS``.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import wave
from collections.abc import Callable
from dataclasses import dataclass

from gateway.errors import GatewayError, bad_request
from gateway.types.codec import FRAMES_PER_SECOND, MIN_AUDIO_TOKENS

TEMPLATE_TOKENS = 3  # <|tts|> <|text|> <|audio|>
REF_AUDIO_TOKENS = 1  # <|ref_audio|>
REF_TEXT_TOKENS = 1  # <|ref_text|>
DELAY_ROWS = 7  # 8 codebooks, each delayed one row more than the last
# A partial frame at the end, and the resampling to 24 kHz, may add a frame.
CLIP_SPARE_FRAMES = 1
MAX_CLIP_S = 30.0  # the worker refuses longer reference clips

# Seconds of audio from the first bytes of a clip, or None when they do not say exactly.
ClipSeconds = Callable[[bytes], float | None]
HEADER_BASE64_CHARS = 8192  # 6 KiB of the clip: a WAV header and the chunks before its data


@dataclass(frozen=True, slots=True)
class Reference:
    """The clip a worker clones from (inline ``ref_audio`` or an uploaded voice's)."""

    seconds: float | None  # None: unknown (a URL, or a data: URI not measured yet)
    data_uri: str | None = None  # measured on demand when the 30 s assumption does not fit
    field: str = "ref_audio"  # what the client sent that brought it: "ref_audio" or "voice"


def text_tokens(text: str | None) -> int:
    """At most one token per UTF-8 byte (byte-level BPE)."""
    return len(text.encode("utf-8")) if text else 0


def clip_tokens(seconds: float) -> int:
    seconds = min(max(seconds, 0.0), MAX_CLIP_S)
    return REF_AUDIO_TOKENS + math.ceil(seconds * FRAMES_PER_SECOND) + CLIP_SPARE_FRAMES + DELAY_ROWS


def wav_header_seconds(head: bytes) -> float | None:
    """A WAV clip's length from its header alone (its data chunk's size): exact, and read
    without decoding, so the request path never stalls on it. Other containers only say
    an estimate there, which could be short: they stay at 30 s."""
    try:
        with wave.open(io.BytesIO(head)) as clip:
            return clip.getnframes() / clip.getframerate()
    except (wave.Error, EOFError, ZeroDivisionError):
        return None


class PromptBound:
    """Refuses a prompt that cannot fit the smallest Stage 0 ``max_model_len`` of the pools,
    and says how many tokens are surely left for audio when it fits."""

    def __init__(self, max_model_len: int, clip_seconds: ClipSeconds = wav_header_seconds) -> None:
        self._max_model_len = max_model_len
        self._clip_seconds = clip_seconds

    def room_for_audio(
        self, text: str, ref_text: str | None, reference: Reference | None, ref_text_field: str = "ref_text"
    ) -> int:
        """Tokens surely left for audio (at least ``MIN_AUDIO_TOKENS``), or a 400 naming the
        field that makes the prompt too long: ``input``, then the clip, then ``ref_text``
        (``ref_text_field``: "voice" when it is an uploaded voice's stored text)."""
        budget = self._max_model_len - MIN_AUDIO_TOKENS  # the prompt may take at most this
        used = TEMPLATE_TOKENS + text_tokens(text)
        if used > budget:
            raise self._too_long("input", f"input is {text_tokens(text)} bytes of UTF-8", budget - TEMPLATE_TOKENS)
        if reference is None:
            return self._max_model_len - used
        seconds = reference.seconds
        if seconds is None and reference.data_uri is not None and used + clip_tokens(MAX_CLIP_S) > budget:
            seconds = _measure(reference.data_uri, self._clip_seconds)  # only when 30 s would not fit
        clip = clip_tokens(MAX_CLIP_S if seconds is None else seconds)
        if used + clip > budget:
            clip_words = "a reference clip of up to 30 s" if seconds is None else "the reference clip"
            raise self._too_long(
                reference.field,
                f"{clip_words} takes up to {clip} tokens beside the input's {text_tokens(text)} bytes",
                budget - TEMPLATE_TOKENS - clip,
                limit_of="input",
            )
        used += clip
        if ref_text:
            used += REF_TEXT_TOKENS + text_tokens(ref_text)
            if used > budget:
                raise self._too_long(
                    ref_text_field,
                    f"ref_text is {text_tokens(ref_text)} bytes of UTF-8 beside the input's {text_tokens(text)} "
                    f"bytes and the reference clip's {clip} tokens",
                    budget - (used - text_tokens(ref_text)),
                    limit_of="ref_text",
                )
        return self._max_model_len - used

    def _too_long(self, field: str, what: str, room: int, limit_of: str | None = None) -> GatewayError:
        shorten = limit_of or field
        split = ", or split the text into several requests" if shorten == "input" else ""
        hint = (
            f"Shorten {shorten} to at most {room} bytes of UTF-8{split}."
            if room > 0
            else f"Use a shorter reference clip or less {shorten}."
        )
        return bad_request(
            f"{field}: the prompt may be too long for the workers: {what}, and a byte can be a token; "
            f"the workers' model length is {self._max_model_len} tokens, prompt and audio together. {hint} "
            "(Chinese and Japanese characters take 3 bytes, emoji 4.)",
            field,
            code="prompt_too_long",
        )


def data_uri_seconds(data_uri: str) -> float | None:
    """An inline WAV clip's length from its header, read from the head of its base64; None
    for another container (or a broken one)."""
    return _measure(data_uri, wav_header_seconds)


def _measure(data_uri: str, clip_seconds: ClipSeconds) -> float | None:
    """The clip's length from the head of its base64, never the whole payload."""
    start = data_uri.find(",") + 1  # a slice, not a copy of a clip of megabytes
    head = "".join(data_uri[start : start + HEADER_BASE64_CHARS].split())
    try:
        audio = base64.b64decode(head[: len(head) // 4 * 4])
    except (ValueError, binascii.Error):
        return None
    return clip_seconds(audio)
