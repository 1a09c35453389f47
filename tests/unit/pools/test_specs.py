"""Pool specs: slots per worker from the configuration and the profile, read once."""

from __future__ import annotations

import pytest

from gateway.config import load_config
from gateway.pools.specs import default_slots, load_pool_profiles, pool_specs
from gateway.types import PoolName

LL, HT = PoolName.LOW_LATENCY, PoolName.HIGH_THROUGHPUT


@pytest.mark.parametrize(
    ("pool", "configured", "max_num_seqs", "expect"),
    [
        (LL, None, 16, 16),  # unset: up to max_num_seqs, predictions decide
        (LL, 8, 16, 8),
        (LL, 32, 16, 16),  # never above what the graph-captured engine can run
        (LL, None, 2, 2),
        (HT, None, 64, 64),
        (HT, 32, 64, 32),
        (HT, 96, 64, 96),  # deliberate oversubscription is kept
    ],
)
def test_default_slots(pool: PoolName, configured: int | None, max_num_seqs: int, expect: int) -> None:
    assert default_slots(pool, configured, max_num_seqs) == expect


@pytest.mark.parametrize(("configured", "max_num_seqs"), [(0, 16), (None, 0)])
def test_default_slots_rejects_nonsense(configured: int | None, max_num_seqs: int) -> None:
    with pytest.raises(ValueError):
        default_slots(LL, configured, max_num_seqs)


def test_specs_come_from_the_profiles_given() -> None:
    high_throughput = {"profile": "higgs_multimodal_qwen3_high_throughput.yaml", "slots_per_worker": 32}
    config = load_config(overrides={"pools": {"high_throughput": high_throughput}})
    profiles = load_pool_profiles(config)
    specs = pool_specs(config, profiles)
    assert specs[LL].max_num_seqs == profiles[LL].talker.max_num_seqs
    assert specs[LL].slots_per_worker == profiles[LL].talker.max_num_seqs
    assert specs[HT].slots_per_worker == 32
    assert specs[HT].profile_path == profiles[HT].source
