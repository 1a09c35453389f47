"""The gateway's guess of which workers hold a reference's codes (``pools.affinity``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.config import load_config
from gateway.pools.affinity import WORKER_CODE_CACHE_ENTRIES, ReferenceAffinity, reference_key
from gateway.pools.fleet import Fleet
from gateway.pools.specs import load_pool_profiles, pool_specs
from gateway.types import PoolName
from gateway.types.labels import RestartReason


def test_reference_keys() -> None:
    assert reference_key({"voice": "anna"}, uploaded_voice=True) == "voice:anna"
    assert reference_key({"voice": "vivian"}, uploaded_voice=False) is None, "a built-in voice has no reference"
    inline = reference_key({"voice": "anna", "ref_audio": "data:audio/wav;base64,AAAA"}, uploaded_voice=True)
    assert inline is not None and inline.startswith("ref:"), "ref_audio is the clip the worker encodes"
    assert inline == reference_key({"ref_audio": "data:audio/wav;base64,AAAA"}, uploaded_voice=False)
    assert reference_key({}, uploaded_voice=False) is None


def test_each_worker_holds_what_it_served_as_an_lru_of_its_cache_size() -> None:
    affinity = ReferenceAffinity(entries_per_worker=2)
    affinity.served("w1", "a")
    affinity.served("w1", "b")
    affinity.served("w2", "a")
    assert affinity.warm_workers("a") == {"w1", "w2"}
    affinity.served("w1", "a")  # a hit moves it to the end, as on the worker
    affinity.served("w1", "c")  # evicts b, the least recently used
    assert affinity.warm_workers("b") == frozenset()
    assert affinity.warm_workers("a") == {"w1", "w2"} and affinity.warm_workers("c") == {"w1"}
    affinity.forget_key("a")
    assert affinity.warm_workers("a") == frozenset()
    assert affinity.warm_workers(None) == frozenset()
    assert WORKER_CODE_CACHE_ENTRIES == 256  # tts_adapters/higgs_audio_v3.py


async def test_a_restarted_worker_starts_cold(tmp_path: Path) -> None:
    config = load_config(overrides={"data_dir": str(tmp_path)})
    fleet = Fleet.build(config, pool_specs(config, load_pool_profiles(config)), clock=lambda: 100.0)
    fleet.members.add_worker(PoolName.LOW_LATENCY, "ll-0", "http://127.0.0.1:1")
    worker = fleet.members.get("ll-0")
    assert worker is not None
    fleet.affinity.served("ll-0", "voice:anna")
    fleet.events.restarted(worker, RestartReason.START_TIME_CHANGED)
    await asyncio.sleep(0)
    assert fleet.affinity.warm_workers("voice:anna") == frozenset()
