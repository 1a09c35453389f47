"""A compressed day on elastic simulated fleets: the trace, the autoscalers, the report."""

from __future__ import annotations

from pathlib import Path

from gateway.bench.workload import text_order
from gateway.simulator.cli import main
from gateway.simulator.day import DayOptions, compare_day, day_rate, day_trace, run_day, setups, smallest_sufficient, sufficient
from gateway.simulator.loop import run_virtual
from gateway.types import SlaClass

SHORT = DayOptions(duration_s=720.0, peak_rate=4.0, provision_delay_s=20.0, tick_s=5.0, stabilisation_s=30.0, window_s=20.0)


def test_the_day_has_a_quiet_night_a_ramp_bursts_and_a_plateau() -> None:
    def at(hour: float) -> float:
        return day_rate(hour / 24)

    assert at(0) == at(7.9) == 0.05  # the night: a third of the day
    assert at(7.9) < at(9) < at(11.9) < at(12.1)  # the morning ramp, into a burst
    afternoon = {round(at(12 + i / 100), 2) for i in range(500)}
    assert afternoon == {0.45, 1.0}  # bursts on an ordinary base
    bursting = sum(1 for i in range(500) if at(12 + i / 100) == 1.0)
    assert 140 <= bursting <= 160  # 18 minutes of each hour
    assert at(17) == at(21.9) == 0.95  # the plateau
    assert at(23.99) < 0.06  # the evening falls back to the night
    arrivals = day_trace(1200.0, 5.0, seed=3)
    assert arrivals == day_trace(1200.0, 5.0, seed=3)  # seeded
    night = sum(1 for a in arrivals if a.at_s < 400)  # 00-08 h
    plateau = sum(1 for a in arrivals if 850 <= a.at_s < 1100)  # 17-22 h
    assert plateau > 8 * night * 250 / 400
    assert {a.sla_class for a in arrivals} == set(SlaClass)


def test_the_planner_scales_the_fleet_up_after_the_provisioning_delay_and_back_down() -> None:
    arrivals = day_trace(SHORT.duration_s, SHORT.peak_rate, SHORT.seed)
    texts = text_order(len(arrivals), SHORT.seed)
    planner = next(s for s in setups(SHORT, texts) if s.name == "planner")
    result = run_virtual(run_day(planner, SHORT, arrivals, texts))
    sizes = [sum(row["gpus"].values()) for row in result["timeline"]]
    assert sizes[0] == 1 and max(sizes) > 1  # grew with the plateau
    assert sizes[-1] < max(sizes)  # and shrank in the evening
    assert result["requests"] == len(arrivals)
    # GPU-hours: every tick's GPUs (provisioning and draining ones too) for a tick.
    assert abs(result["gpu_hours"] - sum(sizes) * SHORT.tick_s / 3600) < 1e-3


def test_static_and_saturation_fleets_run_the_same_day() -> None:
    results, arrivals = compare_day(SHORT)
    by_name = {r["setup"]: r for r in results}
    assert {"planner", "static-peak", "ll-saturation", "ht-saturation"} <= set(by_name)
    # Every static mix of up to the peak sizing's workers, fewest first, each all day.
    sweep = [r for r in results if r.get("static_sweep")]
    peak = sum(by_name["static-peak"]["timeline"][0]["gpus"].values())
    totals = [sum(r["workers"].values()) for r in sweep]
    assert totals == sorted(totals) and totals[0] == 1 and totals[-1] == peak
    assert len(sweep) == sum(total + 1 for total in range(1, peak + 1))
    for r in sweep:
        assert all(sum(row["gpus"].values()) == sum(r["workers"].values()) for row in r["timeline"])
    smallest = smallest_sufficient(results)
    assert smallest is None or (sufficient(smallest) and all(r["gpu_hours"] >= smallest["gpu_hours"] for r in sweep if sufficient(r)))
    static = [sum(row["gpus"].values()) for row in by_name["static-peak"]["timeline"]]
    assert len(set(static)) == 1  # never changes
    assert all(row["gpus"]["high_throughput"] == 0 for row in by_name["ll-saturation"]["timeline"])
    assert all(row["gpus"]["low_latency"] == 0 for row in by_name["ht-saturation"]["timeline"])
    assert all(r["requests"] == len(arrivals) for r in results)


def test_the_command_writes_the_day_report(tmp_path: Path) -> None:
    out = tmp_path / "day"
    assert main(["--day", "--day-length", "300", "--peak-rate", "3", "--provision-delay", "20", "--out", str(out)]) == 0
    report = (out / "README.md").read_text()
    assert "| setup | fleet | latency | balanced | throughput | all | GPU-hours | vs static-peak | vs smallest sufficient static |" in report
    assert "| static mix | latency | balanced | throughput | all | GPU-hours | meets |" in report and "Smallest sufficient: " in report
    assert report.count("\n| ") >= 5 and "![day-timeline](day-timeline.png)" in report
    assert (out / "day-timeline.png").stat().st_size > 0 and (out / "day.json").exists()
