"""The latency model is built from the deploy profile, not from a pool name."""

from __future__ import annotations

import copy
import math

import pytest

from gateway.worker.profile import DeployProfile, ProfileError, load_deploy_profile, parse_deploy_profile
from gateway.worker.timing import StepModel


def test_low_latency_profile_replays_decode_graphs(low_latency: DeployProfile) -> None:
    model = StepModel(low_latency)
    assert model.decode_graphs and not model.lazy_mlp_graph
    assert model.capture_sizes == (1, 2, 4, 8, 16)
    assert model.max_num_seqs == 16
    assert (model.initial_chunk_frames, model.chunk_frames) == (1, 25)
    assert model.streams_early
    assert model.default_seed == 42


def test_high_throughput_profile_is_eager_with_lazy_graphs(high_throughput: DeployProfile) -> None:
    model = StepModel(high_throughput)
    assert not model.decode_graphs and model.lazy_mlp_graph
    assert model.max_num_seqs == 64


def test_stage_overrides_reach_the_model() -> None:
    overridden = load_deploy_profile(
        "higgs_multimodal_qwen3_low_latency.yaml",
        '{"0": {"max_num_seqs": 4, "compilation_config": {"cudagraph_capture_sizes": [1, 4]}}}',
    )
    model = StepModel(overridden)
    assert model.max_num_seqs == 4
    assert model.capture_sizes == (1, 4)
    assert model.padded_batch(2) == 4


def test_eager_override_switches_the_graph_path_off() -> None:
    model = StepModel(load_deploy_profile("higgs_multimodal_qwen3_low_latency.yaml", {"0": {"enforce_eager": True}}))
    assert not model.decode_graphs and model.lazy_mlp_graph


def test_batches_beyond_the_largest_capture_run_eager() -> None:
    model = StepModel(load_deploy_profile("higgs_multimodal_qwen3_low_latency.yaml", {"0": {"max_num_seqs": 32}}))
    assert model.padded_batch(17) is None
    assert model.step(17, 0, 0, set()).seconds > model.step(16, 0, 0, set()).seconds + 0.015


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (lambda raw: raw["stages"][0].update(max_num_seqs="many"), "stages[0].max_num_seqs"),
        (lambda raw: raw["stages"][0].pop("max_num_seqs"), "stages[0].max_num_seqs"),
        (lambda raw: raw["stages"][0].update(enforce_eager="yes"), "stages[0].enforce_eager"),
        (lambda raw: raw["stages"][0]["compilation_config"].update(cudagraph_capture_sizes=[0, 2]), "cudagraph_capture_sizes"),
        (lambda raw: raw["connectors"]["connector_of_shared_memory"]["extra"].update(codec_chunk_frames=0), "codec_chunk_frames"),
        (lambda raw: raw["stages"][0]["default_sampling_params"].update(max_tokens=0), "max_tokens"),
        (lambda raw: raw["stages"][0].update(max_num_batched_tokens="lots"), "max_num_batched_tokens"),
    ],
)
def test_a_broken_profile_names_the_key(low_latency: DeployProfile, mutate: object, key: str) -> None:
    raw = copy.deepcopy(low_latency.raw)
    mutate(raw)  # type: ignore[operator]
    with pytest.raises(ProfileError) as caught:
        StepModel(parse_deploy_profile(raw, source="broken.yaml"))
    assert key in str(caught.value)
    assert "broken.yaml" in str(caught.value)


def test_audio_length_follows_the_text(low_latency: DeployProfile) -> None:
    model = StepModel(low_latency)
    # ~15 characters per second, 25 frames per second.
    assert model.frames_for("x" * 150) == 250
    assert model.frames_for("x" * 300) == 2 * model.frames_for("x" * 150)
    assert model.frames_for("hi") >= 1


def test_audio_length_is_capped_by_the_token_limits(low_latency: DeployProfile) -> None:
    model = StepModel(low_latency)
    delay = model.params.codebook_delay_steps
    # Stage 0 max_tokens (about 82 s), less the delay steps and the trimmed residual frame.
    assert model.frames_for("x" * 10_000) == 2048 - delay - 1
    assert model.frames_for("x" * 150, max_new_tokens=108) == 100
    assert model.decode_steps_for(100) == 108


def test_prompt_grows_with_text_and_reference_audio(low_latency: DeployProfile) -> None:
    model = StepModel(low_latency)
    plain = model.prompt_tokens_for("hello there")
    assert model.prompt_tokens_for("hello there" * 10) > plain
    assert model.prompt_tokens_for("hello there", ref_audio_seconds=6.0, ref_text="reference words") >= plain + 150
    assert model.overhead_seconds(6.0) > model.overhead_seconds()


def test_start_up_takes_minutes_and_longer_with_decode_graphs(low_latency: DeployProfile, high_throughput: DeployProfile) -> None:
    ll, ht = StepModel(low_latency), StepModel(high_throughput)
    p = ll.params
    assert ht.startup_seconds() == p.startup_init_s >= 60.0  # loads, no compile: graphs come lazily
    assert ll.startup_seconds() == p.startup_init_s + p.startup_compile_s + p.startup_graph_capture_s * len(ll.capture_sizes)
    assert ll.startup_seconds() > ht.startup_seconds()


# ---- the per-script length model -------------------------------------------------------------
def test_english_keeps_15_characters_a_second_and_4_a_token(low_latency: DeployProfile) -> None:
    model = StepModel(low_latency)
    text = "a" * 300
    assert model.speech_seconds_for(text) == pytest.approx(20.0)
    assert model.text_tokens_for(text) == 75


def test_chinese_and_japanese_speak_5_characters_a_second_at_about_0_6_tokens_each(low_latency: DeployProfile) -> None:
    model = StepModel(low_latency)
    chinese = "今天天气很好我们一起去公园散步吧" * 10  # 160 Han characters
    japanese = "きょうはとてもよいてんきですね" * 10  # 150 kana
    assert model.speech_seconds_for(chinese) == pytest.approx(32.0)  # ~3x an English clip of the same length
    assert model.speech_seconds_for(japanese) == pytest.approx(30.0)
    assert model.text_tokens_for(chinese) == math.ceil(160 * 0.63)
    assert model.frames_for(chinese) == 32 * 25


def test_rare_scripts_and_new_emoji_cost_up_to_3_tokens_a_character(low_latency: DeployProfile) -> None:
    model = StepModel(low_latency)
    assert model.text_tokens_for("\U00020000" * 100) == 300  # CJK extension B: byte fallback
    assert model.text_tokens_for("\U0001fae0" * 100) == 300  # U+1FAE0, newer than the vocabulary
    assert model.text_tokens_for("\U0001f600" * 100) == 130  # the common emoji are whole tokens
    assert model.text_tokens_for("Быстрая лиса") == math.ceil(11 * 0.5 + 1 / 4)
    assert model.text_tokens_for("तेज़") == 4


@pytest.mark.parametrize(
    "text", ["hello world", "今天天气很好", "Быстрая", "तेज़ भूरी", "😀🫠𠀀", "mixed 中文 and русский 🙂"]
)
def test_tokens_never_exceed_utf8_bytes(low_latency: DeployProfile, text: str) -> None:
    # Byte-level BPE spends at most one token per byte: the gateway's safe bound holds here too.
    assert StepModel(low_latency).text_tokens_for(text) <= len(text.encode())


def test_a_voice_clone_prompt_is_laid_out_as_build_prompt_does(low_latency: DeployProfile) -> None:
    model = StepModel(low_latency)
    plain = model.prompt_tokens_for("hello there")
    assert plain == 3 + model.text_tokens_for("hello there")
    assert model.prompt_tokens_for("hello there", ref_text="ignored without a clip") == plain
    clone = model.prompt_tokens_for("hello there", ref_audio_seconds=6.0, ref_text="reference words")
    assert clone == plain + 1 + (150 + 7) + 1 + model.text_tokens_for("reference words")
    assert model.overhead_seconds(6.0, encode=False) == model.overhead_seconds()
