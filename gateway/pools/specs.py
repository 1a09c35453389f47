"""Each pool's deploy profile, read once at start-up, and what the fleet takes from it.

The profile (with the pool's ``launch.stage_overrides``) is parsed here once; the fleet's
slot counts, the routing's prior curves and the supervisor's profile check all read the
same ``DeployProfile`` objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import GatewayConfig
from gateway.worker.profile import DeployProfile, load_deploy_profile
from gateway.types import PoolName


@dataclass(frozen=True)
class PoolSpec:
    name: PoolName
    profile_path: str
    max_num_seqs: int
    slots_per_worker: int


def load_pool_profiles(config: GatewayConfig) -> dict[PoolName, DeployProfile]:
    """Every pool's profile as its workers run it (raises ``ProfileError`` or ``OSError``)."""
    return {
        name: load_deploy_profile(pool.profile, pool.launch.stage_overrides if pool.launch else None)
        for name, pool in config.pools.items()
    }


def pool_specs(config: GatewayConfig, profiles: dict[PoolName, DeployProfile]) -> dict[PoolName, PoolSpec]:
    specs: dict[PoolName, PoolSpec] = {}
    for name, pool in config.pools.items():
        profile = profiles[name]
        max_num_seqs = profile.talker.max_num_seqs
        specs[name] = PoolSpec(
            name=name,
            profile_path=profile.source,
            max_num_seqs=max_num_seqs,
            slots_per_worker=default_slots(name, pool.slots_per_worker, max_num_seqs),
        )
    return specs


def default_slots(pool: PoolName, configured: int | None, max_num_seqs: int) -> int:
    """Slots per worker from ``pools.<pool>.slots_per_worker`` and the profile's max_num_seqs.

    Unset, a worker may carry up to max_num_seqs: the `adaptive` policy decides from
    predictions how much of that to use, so slots are only a hard cap. low_latency: never
    above max_num_seqs (the graph-captured engine cannot run more). high_throughput: a
    configured value above max_num_seqs is kept on purpose (the worker queues the surplus).
    """
    if max_num_seqs < 1:
        raise ValueError(f"max_num_seqs must be at least 1, got {max_num_seqs}")
    if configured is not None and configured < 1:
        raise ValueError(f"slots_per_worker must be at least 1, got {configured}")
    if pool == PoolName.LOW_LATENCY:
        return min(configured or max_num_seqs, max_num_seqs)
    return configured or max_num_seqs
