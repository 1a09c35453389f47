"""The comparison's setups and its summary table, without starting anything."""

from __future__ import annotations

from gateway.bench import report
from gateway.bench.client import RequestResult
from gateway.bench.compare import SETUPS, headline
from gateway.bench.fleet import HT_PROFILE, LL_PROFILE
from gateway.bench.summary import PhaseResult, summarize_phase


def test_every_setup_has_two_workers_of_known_profiles() -> None:
    assert len({s.name for s in SETUPS}) == len(SETUPS)
    for setup in SETUPS:
        assert len(setup.profiles) == 2 and set(setup.profiles) <= {LL_PROFILE, HT_PROFILE}
    empty_ht = next(s for s in SETUPS if s.name == "ll+ll")
    assert empty_ht.policy == "low_latency_only" and HT_PROFILE not in empty_ht.profiles


def _phase(concurrency: int | None, sla: str | None, ttfp: float) -> dict:
    results = [RequestResult(sla, 50, 0.0, 200, None, "low_latency", ttfp, 1.0, 96_000, 0.0) for _ in range(4)]
    return summarize_phase(PhaseResult("p", "closed", concurrency, 2.0, 0.0, results, loadavg_1m=0.5))


def test_headline_has_one_row_per_configuration() -> None:
    sweep = {"schema": report.SCHEMA, "label": "adaptive", "mode": "sweep", "phases": [_phase(1, None, 0.2), _phase(64, None, 0.5)]}
    trace = {"schema": report.SCHEMA, "label": "adaptive", "mode": "trace", "params": {"kind": "bursty"},
             "phases": [_phase(None, "latency", 0.25)]}
    lines = headline([sweep, trace], [1, 64])
    assert len(lines) == 3
    cells = [cell.strip() for cell in lines[2].split("|")[1:-1]]
    assert cells[0] == "adaptive" and cells[1] == "200"  # c1 TTFP p50 in ms
    assert cells[6] == "250 / 250"  # trace latency TTFP p50 / p99
    assert cells[-1] == "0.5"  # the machine's load while measuring


def test_the_sweeps_length_is_chosen_on_the_command_line() -> None:
    """4 rounds (the committed reports) by default; 12 rounds and 192 requests read the
    steady state the simulator's ceiling is measured at."""
    from gateway.bench.cli import build_parser

    default = build_parser().parse_args(["compare"])
    assert (default.rounds, default.minimum) == (4, 32)
    steady = build_parser().parse_args(["compare", "--rounds", "12", "--minimum", "192"])
    assert (steady.rounds, steady.minimum) == (12, 192)
