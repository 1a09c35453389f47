"""The vllm-omni deploy profiles, shipped in the wheel as ``gateway.bundled_profiles``."""
