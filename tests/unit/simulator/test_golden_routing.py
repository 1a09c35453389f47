"""No routing decision changes unnoticed: the simulator's rows against a committed golden file.

``golden_rows`` runs a few small setups (every policy, a sweep and a bursty trace, two
seeds) in virtual time and writes each routing decision and each phase's outcome as rows.
A refactoring of the routing core must leave every row as it was. A deliberate change of
routing policy regenerates the file and says so in its commit:

    python -m tests.unit.simulator.golden_rows
"""

from __future__ import annotations

from tests.unit.simulator.golden_rows import GOLDEN, generate, render


def test_the_simulated_routing_decisions_match_the_golden_rows() -> None:
    expected = GOLDEN.read_text().splitlines()
    actual = render(generate()).splitlines()
    first = next((i for i, (a, e) in enumerate(zip(actual, expected, strict=False)) if a != e), None)
    assert first is None and len(actual) == len(expected), (
        f"row {first}: expected {expected[first] if first is not None else len(expected)} rows, "
        f"got {actual[first] if first is not None else len(actual)} (regenerate only for a deliberate routing change)"
    )
