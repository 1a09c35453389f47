"""The pass/fail lines of an acceptance run.

Every run checks what the profiles' notes claim on this hardware: native FlashInfer decode
is not slower than XQA (the pin in both profiles), the low-latency and high-throughput curves
cross (routing has something to choose), and every profile's audio is clean at every level.
Against emulated workers it also checks the numbers against the emulator's calibration
(docs/emulator.md) within ±15%: the published H200 RTFs and the published XQA/FlashInfer
A/B ratios (H800, vLLM 0.25).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.acceptance.measure import VariantResult
from gateway.bench.tune import Crossover

TOLERANCE = 0.15
# (variant, concurrency) -> published mean RTF (calibration: vllm-omni PR 4204 review, one H200).
CALIBRATED_RTF: dict[tuple[str, int], float] = {
    ("low_latency", 1): 0.276, ("low_latency", 16): 0.491,
    ("high_throughput", 1): 0.389, ("high_throughput", 16): 0.475,
}  # fmt: skip
# XQA over native FlashInfer at concurrency 1 (H800, vLLM 0.25, vllm-omni issue 5584).
PUBLISHED_XQA = {"ttfp_s": (0.17576, 0.16639), "rtf": (0.3405, 0.3233)}
# Where the review read the crossing: low-latency leads at c <= 4, high-throughput at c >= 8.
CROSSING_RANGE = (4.0, 16.0)


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.name}: {self.detail}"


def level(result: VariantResult, concurrency: int) -> dict[str, object] | None:
    return next((p for p in result.sweep["phases"] if p["concurrency"] == concurrency and p["ok"]), None)


def stat(result: VariantResult, concurrency: int, key: str) -> float | None:
    phase = level(result, concurrency)
    if phase is None:
        return None
    value = phase[key]["median" if key == "ttfp_s" else "mean"]  # type: ignore[index]
    return None if value is None else float(value)


def checks(results: Mapping[str, VariantResult], crossover: Crossover | None, emulated: bool) -> list[Check]:
    found: list[Check] = []
    native, xqa = results.get("low_latency"), results.get("low_latency_xqa")
    if native is not None and xqa is not None:
        for key, label in (("ttfp_s", "TTFP"), ("rtf", "RTF")):
            a, b = stat(xqa, 1, key), stat(native, 1, key)
            if a is None or b is None:
                found.append(Check(f"native FlashInfer {label} at c1", False, "not measured"))
                continue
            found.append(Check(
                f"native FlashInfer {label} at c1 not slower than XQA", b <= a,
                f"FlashInfer {b:.4g} vs XQA {a:.4g} (the profiles pin use_trtllm_attention: false)",
            ))  # fmt: skip
            if emulated:
                published = PUBLISHED_XQA[key][0] / PUBLISHED_XQA[key][1]
                found.append(_within(f"XQA/FlashInfer {label} ratio at c1", a / b, published, "published A/B"))
    if crossover is not None:
        crossing = crossover.crossing
        if emulated:
            ok = crossing is not None and CROSSING_RANGE[0] <= crossing <= CROSSING_RANGE[1]
            detail = f"near {crossing:.1f}" if crossing is not None else "none measured"
            found.append(Check("low-latency and high-throughput RTF curves cross in 4-16", ok, detail + " (review: near 8)"))
        else:
            ok = crossover.last_win is not None and crossover.first_loss is not None
            detail = "near {:.1f}".format(crossing) if crossing is not None else "no crossing in the levels measured"
            found.append(Check("low-latency and high-throughput RTF curves cross", ok, detail))
    if emulated:
        for (name, concurrency), target in CALIBRATED_RTF.items():
            result = results.get(name)
            value = None if result is None else stat(result, concurrency, "rtf")
            if value is None:
                found.append(Check(f"{name} RTF at c{concurrency}", False, "not measured"))
            else:
                found.append(_within(f"{name} RTF at c{concurrency}", value, target, "calibration"))
    for name, result in results.items():
        dirty = [r for r in result.quality if not r.clean]
        detail = (
            f"clean at every level ({', '.join(f'c{r.concurrency}' for r in result.quality)})"
            if not dirty
            else "; ".join(f"c{r.concurrency}: {r.verdicts} ({r.failed_requests} failed)" for r in dirty)
        )
        found.append(Check(f"{name} audio quality", not dirty, detail))
    return found


def _within(name: str, value: float, target: float, source: str) -> Check:
    error = value / target - 1.0
    return Check(name, abs(error) <= TOLERANCE, f"{value:.4g} vs {source} {target:.4g} ({error:+.1%}, bound ±{TOLERANCE:.0%})")
