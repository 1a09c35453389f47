"""The overhead report's arithmetic on hand-made runs."""

from __future__ import annotations

import pytest

from gateway.bench.overhead import cpu_table, split_cost, ttfp_table, write_report


def _run(p50_ms: float, p99_ms: float, cpu_s: float | None = None, idle_s: float = 0.0,
         ok: int = 100, audio_s: float = 1600.0, wall_s: float = 10.0) -> dict:  # fmt: skip
    summary = {"ttfp_s": {"median": p50_ms / 1000, "p99": p99_ms / 1000}, "ok": ok, "audio_s": audio_s, "wall_s": wall_s}
    return {"summary": summary, "cpu_s": cpu_s, "idle_cpu_s": None if cpu_s is None else idle_s}


def _document() -> dict:
    return {
        "time_scale": 0.25, "rounds": 2, "machine": "2-core x86_64",
        "workloads": [{"name": "c64", "concurrency": 64, "short": False},
                      {"name": "c64-short", "concurrency": 64, "short": True}],
        "runs": {
            "direct": {"c64": [_run(100, 150), _run(120, 170)], "c64-short": [_run(50, 60), _run(50, 60)]},
            "gateway": {
                "c64": [_run(103, 160, cpu_s=0.30, idle_s=0.05), _run(121, 176, cpu_s=0.26, idle_s=0.05)],
                "c64-short": [_run(51, 62, cpu_s=0.12, audio_s=250.0), _run(51, 62, cpu_s=0.12, audio_s=250.0)],
            },
        },
    }  # fmt: skip


def test_added_ttfp_is_paired_by_round_and_direct_spread_is_the_noise_floor() -> None:
    table = ttfp_table(_document())
    gateway = table["c64"]["gateway"]
    assert gateway["added_p50"] == pytest.approx(2.0)  # (3 + 1) / 2
    assert gateway["added_p99"] == pytest.approx(8.0)  # (10 + 6) / 2
    assert table["c64"]["direct"]["spread_p50"] == pytest.approx(20.0)
    assert table["c64"]["direct"]["added_p50"] is None


def test_cpu_is_pooled_over_rounds_and_idle_corrected() -> None:
    row = cpu_table(_document())["c64"]["gateway"]
    assert row["per_request_ms"] == pytest.approx(1000 * (0.25 + 0.21) / 200)
    assert row["raw_per_request_ms"] == pytest.approx(1000 * 0.56 / 200)
    assert row["per_audio_s_ms"] == pytest.approx(1000 * 0.46 / 3200)
    assert "direct" not in cpu_table(_document())["c64"]


def test_split_cost_into_fixed_and_per_audio_second() -> None:
    # 1.2 ms for 2.5 s clips and 2.3 ms for 16 s clips: 0.0815 ms per audio second + 0.996 fixed.
    long = {"per_request_ms": 2.3, "audio_s_per_request": 16.0}
    short = {"per_request_ms": 1.2, "audio_s_per_request": 2.5}
    fixed, per_audio = split_cost(long, short)
    assert per_audio == pytest.approx(1.1 / 13.5)
    assert fixed == pytest.approx(1.2 - 2.5 * 1.1 / 13.5)
    assert split_cost(short, short) is None


def test_report_states_targets(tmp_path) -> None:
    doc = "Title line.\n\nThe method paragraph."
    text = write_report(_document(), tmp_path / "overhead.md", "overhead --rounds 2", doc).read_text()
    assert "higgs-gateway bench overhead --rounds 2" in text and "The method paragraph." in text
    assert "| added TTFP p50 (ms) | < 2 | 2.00 | **no** |" in text
    assert "nginx was not installed" in text


def test_report_parts_the_gateways_fixed_cost_from_the_relay_floors(tmp_path) -> None:
    document = _document()
    document["runs"]["floor"] = {
        "c64": [_run(101, 151, cpu_s=0.10), _run(121, 171, cpu_s=0.10)],
        "c64-short": [_run(50, 60, cpu_s=0.04, audio_s=250.0), _run(50, 60, cpu_s=0.04, audio_s=250.0)],
    }
    cpu = cpu_table(document)
    gateway, floor = (
        split_cost(cpu["c64"]["gateway"], cpu["c64-short"]["gateway"]),
        split_cost(cpu["c64"]["floor"], cpu["c64-short"]["floor"]),
    )
    assert gateway is not None and floor is not None
    text = write_report(document, tmp_path / "overhead.md", "overhead", "Title.\n\nMethod.").read_text()
    assert f"Of the gateway's fixed {gateway[0]:.2f} ms per request, {floor[0]:.2f} ms is the relay floor" in text
    assert f"is the other {gateway[0] - floor[0]:.2f} ms." in text
    assert "relay floor" not in write_report(_document(), tmp_path / "plain.md", "overhead", "Title.\n\nMethod.").read_text()
