"""The seam between the gateway's own stores and a shared backend (a fake one here)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from gateway.access_log import AccessLog
from gateway.config import LearningSettings, RoutingConfig, StateConfig
from gateway.errors import GatewayError
from gateway.metrics import GatewayMetrics
from gateway.pools.drains import DrainStore
from gateway.recorder import Recorder
from gateway.routing.control import RoutingControl
from gateway.routing.performance import PerformanceModel
from gateway.routing.thresholds import ThresholdStore
from gateway.state.backend import ChangeKind, StoredVoice
from gateway.state.errors import StateUnavailable
from gateway.state.shared import SharedState, VoiceMirrorOnLoop
from gateway.types import PoolName
from gateway.voices.errors import VoiceError
from gateway.voices.store import VoiceStore
from tests.support.audio import reference_wav
from tests.unit.state.fakes import FakeAdmission, FakeBackend, FakeFleet


class Parts:
    """The stores as the composition root wires them, around one (fake) shared backend."""

    def __init__(self, tmp_path: Path, backend: FakeBackend | None) -> None:
        self.backend = backend
        self.thresholds = ThresholdStore.in_data_dir(tmp_path, RoutingConfig())
        self.fleet = FakeFleet()
        self.admission = FakeAdmission()
        self.performance = PerformanceModel(self.thresholds.current().learning)
        self.routing = RoutingControl(
            self.thresholds, self.admission, self.fleet, self.performance, mirror=backend  # type: ignore[arg-type]
        )
        self.drains = DrainStore.in_data_dir(tmp_path, mirror=backend)
        mirror = VoiceMirrorOnLoop(backend) if backend is not None else None
        self.voices = VoiceStore.in_data_dir(tmp_path, mirror=mirror)
        self.voice_changes = 0
        self.metrics = GatewayMetrics(process_metrics=False)
        self.shared = SharedState(
            StateConfig(backend="redis", redis_url="redis://127.0.0.1:1/0") if backend else StateConfig(),
            backend,
            routing=self.routing,
            thresholds=self.thresholds,
            drains=self.drains,
            fleet=self.fleet,  # type: ignore[arg-type]
            voices=self.voices,
            voice_mirror=mirror,
            voices_changed=self._voices_changed,
            observer=Recorder(self.metrics, AccessLog(enabled=False)),
        )

    def _voices_changed(self) -> None:
        self.voice_changes += 1

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture()
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture()
def parts(tmp_path: Path, backend: FakeBackend) -> Parts:
    return Parts(tmp_path, backend)


def voice_meta(parts: Parts, name: str) -> dict[str, Any]:
    other = VoiceStore(parts.voices.root.parent / f"elsewhere-{name}")
    return other.add(name, reference_wav(), consent="true").to_meta()


async def test_local_backend_is_a_pass_through(tmp_path: Path) -> None:
    local = Parts(tmp_path, None)
    await local.shared.start()
    assert local.shared.rate_limiter is None
    await local.routing.update({"thresholds": {"balanced_threshold": 3}})
    await local.drains.change("low_latency-0", True)
    assert local.thresholds.current().thresholds.balanced_threshold == 3
    assert DrainStore.in_data_dir(tmp_path).ids == {"low_latency-0"}
    assert local.metric("higgs_gateway_state_backend_up", backend="local") == 1


async def test_a_patch_is_written_to_the_shared_store_then_applied_here(parts: Parts) -> None:
    await parts.shared.start()
    parts.backend.routing = {"thresholds": {"reserve_for_latency": 1}}  # another replica's patch
    await parts.routing.update({"thresholds": {"balanced_threshold": 5}, "learning": {"half_life_s": 60}})
    after = parts.thresholds.current()
    assert parts.backend.routing == {
        "thresholds": {"reserve_for_latency": 1, "balanced_threshold": 5}, "learning": {"half_life_s": 60}
    }  # fmt: skip
    assert (after.thresholds.reserve_for_latency, after.thresholds.balanced_threshold) == (1, 5)
    assert parts.performance.settings.half_life_s == 60 and parts.admission.capacity_changes == 1
    assert ThresholdStore.in_data_dir(parts.thresholds.path.parent, RoutingConfig()).current() == after  # kept locally


async def test_an_invalid_patch_or_an_unreachable_store_changes_nothing(parts: Parts) -> None:
    await parts.shared.start()
    with pytest.raises(GatewayError) as invalid:
        await parts.routing.update({"thresholds": {"balanced_hysteresis": -1}})
    assert (invalid.value.status, invalid.value.code) == (400, "invalid_routing_config")
    assert parts.backend.routing == {}
    parts.backend.reachable = False
    with pytest.raises(StateUnavailable) as unavailable:
        await parts.routing.update({"thresholds": {"balanced_threshold": 5}})
    assert unavailable.value.status == 503 and unavailable.value.headers["Retry-After"]
    assert unavailable.value.envelope()["error"]["code"] == "state_unavailable"
    with pytest.raises(StateUnavailable):
        await parts.drains.change("low_latency-0", True)
    assert parts.thresholds.current() == RoutingConfig()
    assert parts.drains.ids == frozenset() and parts.fleet.drained_ids == frozenset()


async def test_changes_from_other_replicas_are_applied(parts: Parts) -> None:
    await parts.shared.start()
    parts.backend.routing = {
        "policy": "least_loaded",
        "thresholds": {"max_per_worker": {"low_latency": 3}, "balanced_rtf_ceiling": 0.7},
        "learning": {"enabled": False},
    }
    parts.backend.drained = {"high_throughput-0"}
    await parts.shared.apply(ChangeKind.ROUTING)
    await parts.shared.apply(ChangeKind.DRAINS)
    current = parts.thresholds.current()
    assert current.policy == "least_loaded"
    assert current.thresholds.max_per_worker == {PoolName.LOW_LATENCY: 3} and current.thresholds.balanced_rtf_ceiling == 0.7
    assert parts.performance.settings == LearningSettings(enabled=False)  # the whole override applies
    assert parts.admission.policies and parts.admission.capacity_changes == 1
    assert parts.fleet.drained_ids == {"high_throughput-0"}
    assert DrainStore.in_data_dir(parts.thresholds.path.parent).ids == {"high_throughput-0"}  # this replica's copy
    await parts.shared.apply(None)  # the periodic full re-read: nothing new, nothing done
    assert parts.admission.capacity_changes == 1
    assert parts.metric("higgs_gateway_state_changes_applied_total", kind="routing") == 1
    assert parts.metric("higgs_gateway_state_changes_applied_total", kind="drains") == 1


async def test_an_override_this_version_cannot_use_is_never_applied(parts: Parts) -> None:
    await parts.shared.start()
    parts.backend.routing = {"thresholds": {"no_such_knob": 1}}
    await parts.shared.apply(ChangeKind.ROUTING)
    assert parts.thresholds.current() == RoutingConfig() and parts.admission.capacity_changes == 0


async def test_voices_follow_the_shared_store(parts: Parts) -> None:
    await parts.shared.start()
    meta = voice_meta(parts, "Remote")
    parts.backend.voices["remote"] = StoredVoice(meta, reference_wav())
    await parts.shared.apply(ChangeKind.VOICES)
    assert parts.voices.get("remote") is not None and parts.voice_changes == 1
    assert parts.voices.read_audio(parts.voices.get("remote")) == reference_wav()  # type: ignore[arg-type]
    del parts.backend.voices["remote"]
    await parts.shared.apply(ChangeKind.VOICES)
    assert parts.voices.get("remote") is None and parts.voice_changes == 2


async def test_voice_writes_go_through_the_shared_store(parts: Parts) -> None:
    await parts.shared.start()
    parts.backend.voices["taken"] = StoredVoice(voice_meta(parts, "taken"), b"x")
    with pytest.raises(VoiceError) as refused:  # taken in the fleet, though not here yet
        await asyncio.to_thread(parts.voices.add, "Taken", reference_wav(), consent="true")
    assert refused.value.status == 409
    await asyncio.to_thread(parts.voices.add, "mine", reference_wav(), consent="true")
    assert "mine" in parts.backend.voices and parts.voices.get("mine") is not None
    parts.backend.reachable = False
    with pytest.raises(StateUnavailable):
        await asyncio.to_thread(parts.voices.add, "later", reference_wav(), consent="true")
    assert parts.voices.get("later") is None
    parts.backend.reachable = True
    deleted = await asyncio.to_thread(parts.voices.delete, "taken")  # only in the shared store
    assert deleted is not None and deleted.name == "taken" and "taken" not in parts.backend.voices


async def test_an_empty_store_is_filled_from_this_replica_never_applied(tmp_path: Path) -> None:
    empty = FakeBackend(initialized=False)
    parts = Parts(tmp_path, None)  # the data directory as a single gateway left it
    await parts.routing.update({"thresholds": {"balanced_threshold": 2}})
    parts.voices.add("kept", reference_wav(), consent="true")
    await parts.drains.change("low_latency-1", True)
    parts = Parts(tmp_path, empty)
    await parts.shared.start()
    await parts.shared.apply(None)
    assert empty.is_initialized
    assert empty.routing == {"thresholds": {"balanced_threshold": 2}}
    assert set(empty.voices) == {"kept"} and empty.drained == {"low_latency-1"}
    assert parts.voices.get("kept") is not None and parts.thresholds.current().thresholds.balanced_threshold == 2
