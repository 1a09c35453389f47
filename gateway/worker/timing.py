"""A Higgs-Audio V3 worker's latency model: every number in one place, each with its source.

A real Higgs-Audio V3 worker runs two stages on one GPU. Stage 0 (the talker) is a
continuously batched decoder: one step yields one codec frame (40 ms of audio) for each
running request. Stage 1 (code2wav) turns codec frames into PCM, chunk by chunk. This
module says how long a Stage 0 step and a Stage 1 chunk take, given the deploy profile.
The emulator's ``engine.py`` turns that into a schedule; the routing's prior curves and
the simulator read the same model, so none of them imports another.

All times are *model* seconds (what a real H200 would take); the server multiplies them
by ``--time-scale`` to run faster or slower than real time.

Check the fit with ``higgs-gateway emulator calibrate``; a unit test holds it to the
published figures in the calibration table (docs/emulator.md).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from gateway.worker.profile import DeployProfile, ProfileError
from gateway.types.codec import FRAMES_PER_SECOND

# vLLM's own capture list when a profile enables full decode graphs but names no sizes.
VLLM_DEFAULT_CAPTURE_SIZES = (1, 2, 4, *range(8, 513, 8))

# h200_decode_step.json: one decode step of a Higgs-V3-shaped backbone (36 layers,
# hidden 2560) on one H200, replayed as a single CUDA graph (ms, by batch size).
H200_GRAPH_STEP_MS = {1: 6.194, 2: 6.529, 4: 6.749, 8: 6.963, 16: 7.197, 32: 7.883, 64: 9.122}
# The same step launched op by op from Python (ms): bound by the host issuing kernels.
H200_EAGER_STEP_MS = {1: 31.683, 2: 30.069, 4: 31.879, 8: 30.996, 16: 39.681, 32: 35.738, 64: 55.952}


@dataclass(frozen=True)
class TimingParams:
    """Every tunable of the model. Defaults reproduce the calibration table within ±15%."""

    # --- audio and text -------------------------------------------------------------
    # Codec frame rate of Higgs-Audio V3 (hop 960 samples at 24 kHz): one frame = 40 ms.
    frames_per_second: int = FRAMES_PER_SECOND
    # English speech runs at 14-16 characters per second of audio (calibration README).
    # Latin script and the "other" scripts (alphabets and abugidas; no published figure,
    # so they take the Latin rate) speak at this rate.
    chars_per_second: float = 15.0
    # Chinese and Japanese: about 4-6 characters per second, clips ~3x an English one of
    # the same length (Mandarin 5.18 syllables/s, one syllable per Han character:
    # Pellegrino, Coupe & Marsico 2011, "A cross-language perspective on speech
    # information rate", Language 87(3)). Korean Hangul is one syllable per character too.
    cjk_chars_per_second: float = 5.0
    # Higgs decodes 8 codebooks with a delay pattern: codebook k lags k steps, so the first
    # complete frame leaves 7 decode steps after the prefill and every clip costs 7 extra.
    codebook_delay_steps: int = 7
    # The last de-delayed frame still carries end-of-codes substitutes; both the final
    # async chunk and the whole-clip path trim it (higgs_audio_v3.py: talker2code2wav,
    # talker2code2wav_async_chunk), so every clip costs one decode step more than it plays.
    final_trim_frames: int = 1
    # Prompt size, as the released prompt builder lays it out (vllm-omni 0.30.0
    # higgs_audio_v3_tokenizer.py build_prompt, lines 139-153): <|tts|> [<|ref_text|> ref
    # text] [<|ref_audio|> one row per reference code row] <|text|> text <|audio|>.
    prompt_template_tokens: int = 3
    # The text at ~4 characters per token (Qwen3 tokenizer on English; measured 4.7 on
    # the calibration sentences with Qwen's byte-level BPE, see docs/emulator.md).
    chars_per_text_token: float = 4.0
    # Tokens per character of the other scripts, measured on running text with Qwen's
    # 151,643-token byte-level BPE (the vocabulary Qwen3 and so Higgs V3 keep): Chinese
    # 0.62, Japanese 0.64, Korean 0.64 (CJK); Russian 0.43, Arabic 0.40, Greek 0.83
    # (2-byte UTF-8 alphabets); Hindi 0.98, Thai 0.73, Georgian 1.00, Tibetan 1.38 (3-byte);
    # one character of a 4-byte one alone: the common emoji blocks 1.2-1.5, newer emoji,
    # CJK extension B and historic scripts 3.0-3.4 (the bytes fall back to 1-2 per token).
    cjk_tokens_per_char: float = 0.63
    other_tokens_per_char_by_utf8_len: dict[int, float] = field(default_factory=lambda: {2: 0.5, 3: 1.0, 4: 3.0})
    emoji_tokens_per_char: float = 1.3  # U+1F300-U+1F9FF, the emoji Qwen's vocabulary holds whole
    # A reference clip enters the prompt as its codec frames (25 per second of audio) after
    # the delay pattern: T frames of 8 codebooks become T + 7 rows (higgs_audio_v3_tokenizer.py
    # apply_delay_pattern 46-61; tts_adapters/higgs_audio_v3.py 78-83 passes the row count).
    ref_audio_tokens_per_second: float = 25.0

    # --- API server, before the scheduler sees the request ----------------------------
    # HTTP parsing, text normalisation, tokenisation, Higgs prompt building and the hop
    # into the engine core. Sized so median TTFP at c1 lands in 150-250 ms (H800 issue:
    # 166 ms LL; CI baseline: 223 ms on an H100 with the eager profile).
    request_overhead_ms: float = 60.0
    # Encoding a reference clip into codec tokens for voice cloning (per second of clip).
    # Paid only when the encoded codes are not cached (tts_adapters/higgs_audio_v3.py
    # 96-132: a cached artifact is reused, an in-flight encode awaited).
    ref_audio_encode_ms_per_second: float = 6.0
    # An upload reads and saves the clip on the worker's event loop (serving_speech.py
    # upload_voice 948 soundfile decode, 985 safetensors save_file), and the first speech
    # request with the voice loads it back and re-encodes it as a WAV data URL on the loop
    # (694-718, memoized per voice). Not measured: sized from decoding and writing ~1 MB of
    # float32 per 10 s of 24 kHz audio, "tens of milliseconds per clip".
    voice_upload_block_ms: float = 8.0
    voice_upload_block_ms_per_second: float = 2.0
    voice_first_use_block_ms: float = 2.0
    voice_first_use_block_ms_per_second: float = 1.0

    # --- Stage 0 step: parts every step pays ------------------------------------------
    # Host work per step outside the model forward: scheduler, input preparation, output
    # processing, connector hand-off to Stage 1. Fitted with the LL c1 RTF (0.276).
    step_host_ms: float = 3.0
    # GPU work per running request and step outside the backbone: the 8-codebook audio head
    # and its sampling, plus Stage 1 (code2wav) sharing the same GPU. A graph-replayed step is
    # GPU-bound and pays it in full; an eager step hides it under kernel launch time until
    # the GPU becomes the bottleneck. Fitted to the rise of RTF from c1 to c16.
    gpu_per_seq_ms: float = 0.29
    # Prefill cost per prompt token in a step that admits new requests (FlashInfer prefill,
    # 50-200 tokens per request here). Fitted to TTFP and the voice-clone RTF offset.
    prefill_ms_per_token: float = 0.012
    # Attention over the KV cache: extra ms per step per 1000 context tokens in the batch.
    attention_ms_per_kilo_context: float = 0.05

    # --- Stage 0 step: the backbone, by profile ----------------------------------------
    # Full decode graphs (LL, FULL_DECODE_ONLY): the H200 graph replay, by padded size.
    graph_step_ms: dict[int, float] = field(default_factory=lambda: dict(H200_GRAPH_STEP_MS))
    # A graph profile's step that carries a prefill, or a batch beyond the largest captured
    # size, runs op by op with no graph at all (Higgs' local MLP graph is off whenever vLLM's
    # decode graph is on): the H200 op-by-op measurement times this scale, which also covers
    # building mixed prefill/decode attention metadata. Fitted to the LL c8-c16 RTF, which
    # these steps drive (they are why LL falls behind HT from c8 on).
    mixed_step_eager_scale: float = 1.25
    # FlashInfer routing Hopper decode to the TRT-LLM XQA kernel (Stage 0
    # attention_config.use_trtllm_attention: true): the one published A/B (H800, vLLM 0.25,
    # vllm-omni issue 5584, concurrency 1) measured RTF 0.3405 vs 0.3233 and TTFP 175.76 vs
    # 166.39 ms against native FlashInfer; every step takes the RTF ratio longer.
    xqa_step_scale: float = 0.3405 / 0.3233
    eager_step_ms: dict[int, float] = field(default_factory=lambda: dict(H200_EAGER_STEP_MS))
    # Eager profile (HT, default): attention and friends launched op by op, Higgs' local MLP
    # replayed as a graph. The step is bound by the host launching kernels (base + per
    # request) until the GPU work (graph-step work times the factor below, plus the
    # per-request work above) exceeds it. Fitted to HT at c1 (0.389) and c16 (0.475).
    mlp_graph_host_ms: float = 10.9
    mlp_graph_host_per_seq_ms: float = 0.0
    eager_gpu_factor: float = 1.23
    # One-off capture of the local MLP graph (36 layers) the first time a decode step meets
    # a new exact batch size: a cold HT worker's latency spike (vllm-omni worker notes).
    mlp_graph_capture_ms: float = 450.0

    # --- start-up: before the worker answers HTTP at all --------------------------------
    # Not measured here: sized from the worker notes ("budget minutes": weights of both
    # stages, engine init, torch.compile, graph capture), so profile changes and start
    # timeouts meet a realistic wait. Loading both stages and initialising the engines:
    startup_init_s: float = 90.0
    # A profile with vLLM decode graphs compiles the backbone (torch.compile) first...
    startup_compile_s: float = 60.0
    # ...then captures one full decode graph per capture size.
    startup_graph_capture_s: float = 0.25

    # --- Stage 1: code2wav ----------------------------------------------------------
    # Turning one chunk of codec frames into PCM and handing it to the API server.
    code2wav_chunk_ms: float = 6.0
    code2wav_per_frame_ms: float = 0.25


@dataclass(frozen=True)
class ClipPlan:
    """What one request makes: audio frames, and the Stage 0 steps (output tokens) behind them."""

    frames: int
    decode_steps: int


@dataclass(frozen=True)
class StepCost:
    seconds: float
    captured_batch_size: int | None  # a lazy graph capture this step paid for


class StepModel:
    """Step and chunk durations for one deploy profile (after ``--stage-overrides``)."""

    def __init__(self, profile: DeployProfile, params: TimingParams | None = None) -> None:
        self.params = params or TimingParams()
        talker = profile.talker
        self.max_num_seqs = talker.max_num_seqs
        self.max_num_batched_tokens = talker.max_num_batched_tokens or 8192
        if not isinstance(self.max_num_batched_tokens, int) or self.max_num_batched_tokens <= 0:
            raise ProfileError(profile.source, "stages[0].max_num_batched_tokens", "must be a positive integer")
        max_tokens = talker.max_tokens if talker.max_tokens is not None else 2048
        if not isinstance(max_tokens, int) or max_tokens <= 0:
            raise ProfileError(profile.source, "stages[0].default_sampling_params.max_tokens", "must be > 0")
        self.max_tokens = max_tokens
        # Prompt plus output: vLLM stops a request there (FINISHED_LENGTH_CAPPED), whatever
        # max_new_tokens asked for. None: the profile leaves it to the model's config.
        self.max_model_len = talker.max_model_len
        self.default_seed = talker.seed if isinstance(talker.seed, int) else 42
        self.decode_graphs = talker.decode_graphs
        self.xqa_decode = talker.use_trtllm_attention is True
        self.capture_sizes = talker.cudagraph_capture_sizes or (VLLM_DEFAULT_CAPTURE_SIZES if self.decode_graphs else ())
        # Higgs' local MLP graph exists only on the eager path, and is captured lazily.
        self.lazy_mlp_graph = not self.decode_graphs
        self.streams_early = profile.streams_early
        self.initial_chunk_frames = profile.initial_codec_chunk_frames
        self.chunk_frames = profile.codec_chunk_frames
        self.holdback_frames = profile.codec_right_holdback_frames

    def startup_seconds(self) -> float:
        """Model seconds from launch until HTTP answers: the eager (HT) profile loads and
        initialises; a decode-graph (LL) profile also compiles and captures each size. The
        eager profile's local MLP graphs come later, lazily (what the warm-up is for)."""
        p = self.params
        if not self.decode_graphs:
            return p.startup_init_s
        return p.startup_init_s + p.startup_compile_s + p.startup_graph_capture_s * len(self.capture_sizes)

    # --- Stage 0 ----------------------------------------------------------------------
    def padded_batch(self, batch: int) -> int | None:
        """The captured graph size a decode batch replays with, or None (runs eager)."""
        index = bisect.bisect_left(self.capture_sizes, batch)
        return self.capture_sizes[index] if index < len(self.capture_sizes) else None

    def step(self, batch: int, prefill_tokens: int, context_tokens: int, captured: set[int]) -> StepCost:
        """One Stage 0 step over ``batch`` requests, ``prefill_tokens`` of them new prompt.

        ``captured`` holds the batch sizes whose local MLP graph exists; a capture this step
        needs is reported, and the caller adds it to the set.
        """
        p = self.params
        ms = p.step_host_ms + p.prefill_ms_per_token * prefill_tokens
        gpu_extra = p.gpu_per_seq_ms * batch + p.attention_ms_per_kilo_context * context_tokens / 1000.0
        captured_now: int | None = None
        if self.decode_graphs:
            padded = self.padded_batch(batch)
            if prefill_tokens or padded is None:
                ms += _interpolate(p.eager_step_ms, batch) * p.mixed_step_eager_scale + gpu_extra
            else:
                ms += _interpolate(p.graph_step_ms, padded) + gpu_extra
        else:
            host = p.mlp_graph_host_ms + p.mlp_graph_host_per_seq_ms * batch
            gpu = p.eager_gpu_factor * _interpolate(p.graph_step_ms, batch) + gpu_extra
            ms += max(host, gpu)
            if not prefill_tokens and batch not in captured:
                ms += p.mlp_graph_capture_ms
                captured_now = batch
        if self.xqa_decode:
            ms *= p.xqa_step_scale
        return StepCost(ms / 1000.0, captured_now)

    # --- Stage 1 ----------------------------------------------------------------------
    def code2wav_seconds(self, frames: int) -> float:
        return (self.params.code2wav_chunk_ms + self.params.code2wav_per_frame_ms * frames) / 1000.0

    # --- requests ---------------------------------------------------------------------
    def plan(self, text: str, max_new_tokens: int | None = None, prompt_tokens: int = 0) -> ClipPlan:
        """The frames a text yields (its spoken length) and the steps behind them, within
        the token budget: ``max_new_tokens`` replaces Stage 0's ``max_tokens`` (vllm-omni
        tts_adapters/base.py apply_max_new_tokens), and no request outgrows max_model_len."""
        p = self.params
        natural = max(1, math.ceil(self.speech_seconds_for(text.strip()) * p.frames_per_second))
        budget = self.max_tokens if max_new_tokens is None else max_new_tokens
        if self.max_model_len is not None:
            budget = min(budget, max(0, self.max_model_len - prompt_tokens))
        steps = self.decode_steps_for(natural)
        if steps <= budget:
            return ClipPlan(natural, steps)
        return ClipPlan(self.frames_within(budget), budget)

    def frames_for(self, text: str, max_new_tokens: int | None = None, prompt_tokens: int = 0) -> int:
        """Codec frames a text yields: its spoken length, capped by the token limits."""
        return self.plan(text, max_new_tokens, prompt_tokens).frames

    def frames_within(self, steps: int) -> int:
        """Frames a request cut off after ``steps`` decode steps delivers.

        higgs_audio_v3.py talker2code2wav_async_chunk: N rows de-delay into N - 7 frames,
        and the final flush trims the residual frame only when at least two are left: fewer
        than 8 rows make an empty chunk (a 200 with no audio), 8 rows make one frame.
        """
        p = self.params
        de_delayed = max(0, steps - p.codebook_delay_steps)
        return de_delayed - p.final_trim_frames if de_delayed > p.final_trim_frames else de_delayed

    def decode_steps_for(self, frames: int) -> int:
        """Stage 0 steps (= output tokens) behind ``frames`` of audio, when the clip ends by itself."""
        return frames + self.params.codebook_delay_steps + self.params.final_trim_frames

    def rows_before_chunk(self, target_frames: int, total_frames: int, total_steps: int | None = None) -> int:
        """Decode steps Stage 0 must have run before audio up to ``target_frames`` leaves.

        higgs_audio_v3.py, talker2code2wav_async_chunk: N steps give N - 7 de-delayed
        frames; a non-final chunk also waits for ``holdback`` frames of right context, so
        the first 1-frame chunk needs 7 + 4 + 1 = 12 steps. The final flush waits for the
        last step, releases the hold-back and trims the residual frame.
        """
        if target_frames >= total_frames:
            return self.decode_steps_for(total_frames) if total_steps is None else total_steps
        return self.params.codebook_delay_steps + target_frames + self.holdback_frames

    def ref_audio_tokens_for(self, ref_audio_seconds: float) -> int:
        """Prompt rows of a reference clip: its codec frames plus the 7 of the delay pattern."""
        if ref_audio_seconds <= 0:
            return 0
        frames = math.ceil(ref_audio_seconds * self.params.ref_audio_tokens_per_second)
        return frames + self.params.codebook_delay_steps

    def text_tokens_for(self, text: str) -> int:
        """Tokens of a text under the per-script model (byte-level BPE; see TimingParams)."""
        p = self.params
        counts = script_counts(text)
        tokens = counts.latin / p.chars_per_text_token + counts.cjk * p.cjk_tokens_per_char
        tokens += counts.emoji * p.emoji_tokens_per_char
        for utf8_len, chars in counts.other_by_utf8_len.items():
            tokens += chars * p.other_tokens_per_char_by_utf8_len[utf8_len]
        return math.ceil(tokens)

    def speech_seconds_for(self, text: str) -> float:
        """Seconds of audio a text speaks: CJK at its own rate, everything else at Latin's."""
        counts = script_counts(text)
        p = self.params
        return counts.cjk / p.cjk_chars_per_second + (counts.total - counts.cjk) / p.chars_per_second

    def prompt_tokens_for(self, text: str, ref_audio_seconds: float = 0.0, ref_text: str = "") -> int:
        """Stage 0's prompt length, laid out as build_prompt does (higgs_audio_v3_tokenizer.py 139-153):
        the reference text and its marker only come with a reference clip."""
        p = self.params
        tokens = p.prompt_template_tokens + self.text_tokens_for(text)
        if ref_audio_seconds > 0:
            tokens += 1 + self.ref_audio_tokens_for(ref_audio_seconds)  # <|ref_audio|> + rows
            if ref_text:
                tokens += 1 + self.text_tokens_for(ref_text)  # <|ref_text|> + its tokens
        return tokens

    def prompt_fits(self, prompt_tokens: int) -> bool:
        """vllm 0.30.0 v1/engine/input_processor.py _validate_prompt_len 457-485: a prompt of
        max_model_len tokens or more is refused (equal leaves no room for one output token)."""
        return self.max_model_len is None or prompt_tokens < self.max_model_len

    def overhead_seconds(self, ref_audio_seconds: float = 0.0, encode: bool = True) -> float:
        """Model seconds in the API server; a clip whose codes are cached costs no encode."""
        p = self.params
        encode_ms = p.ref_audio_encode_ms_per_second * ref_audio_seconds if encode else 0.0
        return (p.request_overhead_ms + encode_ms) / 1000.0

    def voice_upload_block_seconds(self, clip_seconds: float) -> float:
        p = self.params
        return (p.voice_upload_block_ms + p.voice_upload_block_ms_per_second * clip_seconds) / 1000.0

    def voice_first_use_block_seconds(self, clip_seconds: float) -> float:
        p = self.params
        return (p.voice_first_use_block_ms + p.voice_first_use_block_ms_per_second * clip_seconds) / 1000.0


@dataclass(frozen=True)
class ScriptCounts:
    """Characters of a text by script: what its token count and spoken length depend on."""

    latin: int = 0  # ASCII, Latin-1, Latin Extended, general punctuation, whitespace
    cjk: int = 0  # Han (BMP), kana, Hangul, CJK punctuation, full-width forms
    emoji: int = 0  # U+1F300-U+1F9FF
    other_by_utf8_len: dict[int, int] = field(default_factory=dict)  # every other character

    @property
    def total(self) -> int:
        return self.latin + self.cjk + self.emoji + sum(self.other_by_utf8_len.values())


_CJK_RANGES = ((0x2E80, 0x2FDF), (0x3000, 0x30FF), (0x3100, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF),
               (0xAC00, 0xD7AF), (0xF900, 0xFAFF), (0xFF00, 0xFFEF), (0x1100, 0x11FF), (0x3130, 0x318F))  # fmt: skip


def _is_latin(code: int) -> bool:
    return code < 0x250 or 0x1E00 <= code <= 0x1EFF or 0x2000 <= code <= 0x206F


def script_counts(text: str) -> ScriptCounts:
    if text.isascii():
        return ScriptCounts(latin=len(text))
    latin = cjk = emoji = 0
    other: dict[int, int] = {}
    for char in text:
        code = ord(char)
        if _is_latin(code):
            latin += 1
        elif any(lo <= code <= hi for lo, hi in _CJK_RANGES):
            cjk += 1
        elif 0x1F300 <= code <= 0x1F9FF:
            emoji += 1
        else:
            utf8_len = 2 if code < 0x800 else 3 if code < 0x10000 else 4
            other[utf8_len] = other.get(utf8_len, 0) + 1
    return ScriptCounts(latin, cjk, emoji, other)


def _interpolate(table: dict[int, float], batch: int) -> float:
    """Piecewise-linear in batch size through the measured points; extrapolated past the last."""
    sizes = sorted(table)
    if batch <= sizes[0]:
        return table[sizes[0]]
    if batch >= sizes[-1]:
        # Beyond the last measurement, grow with the last segment's slope.
        lo, hi = sizes[-2], sizes[-1]
        return table[hi] + (table[hi] - table[lo]) / (hi - lo) * (batch - hi)
    index = bisect.bisect_left(sizes, batch)
    lo, hi = sizes[index - 1], sizes[index]
    if hi == batch:
        return table[hi]
    return table[lo] + (table[hi] - table[lo]) * (batch - lo) / (hi - lo)
