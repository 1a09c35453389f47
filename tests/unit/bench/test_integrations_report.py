"""``bench integrations``' targets and report, on documents made here (no fleet)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.bench.integrations import report_lines, targets


def interruption(audio_after_s: float = 0.0, next_first_audio_s: float | None = 0.3) -> dict[str, Any]:
    return {"heard_before_s": 1.0, "audio_after_s": audio_after_s, "close_s": 0.05,
            "next_first_audio_s": next_first_audio_s, "next_audio_s": 12.0}  # fmt: skip


def document(session: list[float | None], pipecat: list[float | None], livekit: list[float | None]) -> dict[str, Any]:
    def client(values: list[float | None]) -> dict[str, Any]:
        return {"first_audio_s": values, "audio_s": [12.0] * len(values), "connects": 1}

    return {
        "schema": "higgs-gateway-bench-integrations/1", "time_scale": 0.25, "machine": "2-core x86_64",
        "params": {"sentences": 3, "tokens_per_second": 30.0, "interrupt_after_s": 1.0},
        "notes": {"setup": "1 low-latency + 1 high-throughput, adaptive", "command": "higgs-gateway bench integrations",
                  "loadavg_1m": {"min": 1.0, "max": 2.0}},
        "clients": {"session": client(session), "pipecat": client(pipecat), "livekit": client(livekit),
                    "pipecat-tokens": client(pipecat)},
        "interruptions": {"pipecat": [interruption()], "livekit": [interruption()]},
    }  # fmt: skip


def test_first_audio_within_ten_percent_of_the_session_clients_is_met() -> None:
    doc = document([0.20, 0.25, 0.30], [0.27, 0.27, 0.40], [0.25, 0.26, 0.50])
    found = {t.name: t for t in targets(doc)}
    pipecat = found["pipecat: first audio p50 vs the session client's"]
    assert pipecat.value == pytest.approx(0.27) and pipecat.bound == pytest.approx(0.275) and pipecat.met
    assert found["livekit: first audio p50 vs the session client's"].met
    assert all(t.met for t in targets(doc))


def test_a_slower_framework_a_late_stop_or_a_reconnect_is_missed() -> None:
    doc = document([0.20, 0.25, 0.30], [0.28, 0.28, 0.28], [0.25, 0.25, 0.25])
    assert not {t.name: t for t in targets(doc)}["pipecat: first audio p50 vs the session client's"].met
    late = copy.deepcopy(doc)
    late["interruptions"]["livekit"] = [interruption(audio_after_s=0.101)]
    assert [t.met for t in targets(late) if t.name.startswith("livekit: interruption")] == [False]
    reconnected = copy.deepcopy(doc)
    reconnected["clients"]["pipecat"]["connects"] = 2
    assert [t.met for t in targets(reconnected) if t.name.startswith("pipecat: sockets")] == [False]
    silent = copy.deepcopy(doc)
    silent["interruptions"]["pipecat"] = [interruption(next_first_audio_s=None)]
    assert [t.met for t in targets(silent) if t.name.startswith("pipecat: sockets")] == [False]


def test_a_reply_without_audio_leaves_no_median_and_misses() -> None:
    doc = document([0.20, 0.25, 0.30], [0.25, None, 0.25], [0.25, 0.25, 0.25])
    pipecat = {t.name: t for t in targets(doc)}["pipecat: first audio p50 vs the session client's"]
    assert pipecat.value is None and not pipecat.met


def test_the_report_names_every_client_and_the_shared_machine() -> None:
    text = "\n".join(report_lines(document([0.2, 0.25, 0.3], [0.26, 0.27, 0.28], [0.25, 0.25, 0.25])))
    assert "7 of 7 met" not in text and "6 of 6 met" in text
    for name in ("| session |", "| pipecat |", "| livekit |", "| pipecat-tokens |"):
        assert name in text
    assert "shared" in text and "load average 1.0–2.0" in text
