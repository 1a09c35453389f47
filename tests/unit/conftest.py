from __future__ import annotations

import pytest

from gateway.worker.profile import DeployProfile, load_deploy_profile

LOW_LATENCY = "higgs_multimodal_qwen3_low_latency.yaml"
HIGH_THROUGHPUT = "higgs_multimodal_qwen3_high_throughput.yaml"


@pytest.fixture(scope="session")
def low_latency() -> DeployProfile:
    return load_deploy_profile(LOW_LATENCY)


@pytest.fixture(scope="session")
def high_throughput() -> DeployProfile:
    return load_deploy_profile(HIGH_THROUGHPUT)
