"""Security, ``serve --print-config``: what it prints can be pasted into a ticket. Passwords in
URLs (worker URLs, ``tracing.endpoint``) and credential options in ``launch.command`` are
masked along with the secrets the config names as such."""

from __future__ import annotations

import yaml

from gateway.config import load_config
from gateway.config_check import REDACTED, config_yaml

LL_PROFILE = "higgs_multimodal_qwen3_low_latency.yaml"
HT_PROFILE = "higgs_multimodal_qwen3_high_throughput.yaml"


def test_url_passwords_and_secret_arguments_are_masked() -> None:
    config = load_config(
        overrides={
            "pools": {
                "low_latency": {"profile": LL_PROFILE, "workers": ["http://ops:worker-pass-111@10.0.0.5:8091"]},
                "high_throughput": {
                    "profile": HT_PROFILE,
                    "launch": {
                        "gpus": ["0"],
                        "command": ["vllm", "serve", "--api-key", "cmd-secret-222", "--hf-token=cmd-secret-333",
                                    "--max-num-batched-tokens", "8192"],
                    },
                },
            },
            "tracing": {"endpoint": "https://tracer:trace-pass-444@collector.example:4318"},
        }
    )
    out = config_yaml(config)
    for secret in ("worker-pass-111", "cmd-secret-222", "cmd-secret-333", "trace-pass-444"):
        assert secret not in out
    document = yaml.safe_load(out)
    assert document["pools"]["low_latency"]["workers"] == [f"http://ops:{REDACTED}@10.0.0.5:8091"]
    assert document["tracing"]["endpoint"] == f"https://tracer:{REDACTED}@collector.example:4318"
    command = document["pools"]["high_throughput"]["launch"]["command"]
    assert command == ["vllm", "serve", "--api-key", REDACTED, f"--hf-token={REDACTED}", "--max-num-batched-tokens", "8192"]
