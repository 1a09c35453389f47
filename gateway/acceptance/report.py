"""What an acceptance run writes: a report shaped like the profiles' notes, the curves in
``tune``'s format (``tune.json``: apply ``recommendation.measured`` as ``routing.measured``),
the thresholds as a config snippet, and every raw sweep."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.acceptance.checks import PUBLISHED_XQA, Check, stat
from gateway.acceptance.measure import VariantResult
from gateway.bench.report import units_note
from gateway.bench.tune import explain, measured_curves, recommend
from gateway.types import PoolName


def tune_document(results: Mapping[str, VariantResult]) -> dict[str, Any]:
    """``higgs-gateway tune``'s ``tune.json`` from the two profiles' native sweeps."""
    documents = {PoolName.LOW_LATENCY: results["low_latency"].sweep, PoolName.HIGH_THROUGHPUT: results["high_throughput"].sweep}
    for document in documents.values():
        document["params"].setdefault("workers", 1)
    rec = recommend(documents, "rtf", 1)
    rec["measured"] = measured_curves(documents)
    return {"recommendation": rec, "measurements": {pool.value: doc for pool, doc in documents.items()}}


def thresholds_snippet(rec: Mapping[str, Any]) -> str:
    return (
        f"routing:\n  measured: {json.dumps(rec['measured'])}\n"
        f"  thresholds:\n    balanced_threshold: {rec['balanced_threshold']}  # rules policy\n"
        f"pools:\n  low_latency:\n    slots_per_worker: {rec['slots_per_worker']}  # rules policy only\n"
    )


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{1000 * value:.1f}"


def _rtf(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def markdown(
    results: Mapping[str, VariantResult], tune: Mapping[str, Any], found: list[Check], *, command: str, emulated: bool,
    time_scale: float, machine: str = "",
) -> str:
    rec = tune["recommendation"]
    native, xqa, ht = (results.get(name) for name in ("low_latency", "low_latency_xqa", "high_throughput"))
    lines = [
        "# Acceptance: Higgs-Audio V3 on this fleet" + (" (emulated workers)" if emulated else ""), "",
        f"Reproduce: `{command}`", "",
        units_note(time_scale), "Concurrency is requests in flight on the one worker measured; RTF is end-to-end "
        "latency over audio duration (client side, streaming PCM), TTFP the median time to the first audio byte." + (
            f" {machine}" if machine else ""), "",
        "## Decode path of the low-latency Stage 0 (concurrency 1)", "",
        "| decode path | `use_trtllm_attention` | TTFP p50 (ms) | RTF mean | published (H800, vLLM 0.25) |",
        "|---|---|---:|---:|---|",
    ]  # fmt: skip
    for result, flag, published in ((native, "false", 1), (xqa, "true", 0)):
        if result is not None:
            ttfp, rtf = PUBLISHED_XQA["ttfp_s"][published], PUBLISHED_XQA["rtf"][published]
            lines.append(
                f"| {result.variant.decode_path} | {flag} | {_ms(stat(result, 1, 'ttfp_s'))} | {_rtf(stat(result, 1, 'rtf'))} "
                f"| {1000 * ttfp:.2f} ms / {rtf:.4f} |"
            )
    lines += ["", "## Low-latency vs high-throughput", "",
              "| concurrency | LL TTFP p50 (ms) | HT TTFP p50 (ms) | LL RTF mean | HT RTF mean |", "|---:|---:|---:|---:|---:|"]  # fmt: skip
    if native is not None and ht is not None:
        levels = sorted({p["concurrency"] for p in native.sweep["phases"]} | {p["concurrency"] for p in ht.sweep["phases"]})
        for c in levels:
            lines.append(
                f"| {c} | {_ms(stat(native, c, 'ttfp_s'))} | {_ms(stat(ht, c, 'ttfp_s'))} "
                f"| {_rtf(stat(native, c, 'rtf'))} | {_rtf(stat(ht, c, 'rtf'))} |"
            )
    lines += ["", explain(rec), "", "## Audio quality per profile", "",
              "Each level: as many requests at once as the level, every clip scored as the gateway's sampler does "
              "(docs/quality.md): HNR (median over voiced frames), clipping, silence, level.", "",
              "| variant | concurrency | verdicts | HNR median (dB) | HNR min (dB) | failed requests |", "|---|---:|---|---:|---:|---:|"]  # fmt: skip
    for result in results.values():
        for q in result.quality:
            d = q.as_dict()
            verdicts = ", ".join(f"{k} {v}" for k, v in sorted(q.verdicts.items())) or "–"
            lines.append(f"| {result.variant.name} | {q.concurrency} | {verdicts} | {d['hnr_db_median']} | {d['hnr_db_min']} | {q.failed_requests} |")
    lines += ["", "## Checks", "", "```", *[c.line() for c in found], "```", "",
              f"{sum(c.passed for c in found)} of {len(found)} checks passed.", "",
              "## Routing prior", "",
              "`tune.json` holds the measured curves in `higgs-gateway tune`'s format; apply them at run time with "
              "`PATCH /admin/routing` (`{\"measured\": ...}`) or in the config:", "",
              "```yaml", thresholds_snippet(rec) + "```", ""]  # fmt: skip
    return "\n".join(lines)


def write(
    out: Path, results: Mapping[str, VariantResult], tune: Mapping[str, Any], found: list[Check], text: str
) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "report.md": text,
        "tune.json": json.dumps(tune, indent=2) + "\n",
        "thresholds.yaml": thresholds_snippet(tune["recommendation"]),
        "checks.json": json.dumps([{"name": c.name, "passed": c.passed, "detail": c.detail} for c in found], indent=2) + "\n",
        "runs.json": json.dumps(
            {name: {"sweep": r.sweep, "quality": [q.as_dict() for q in r.quality], "startup_s": round(r.startup_s, 2)}
             for name, r in results.items()}, indent=2,
        ) + "\n",
    }  # fmt: skip
    for name, content in paths.items():
        (out / name).write_text(content)
    return [out / name for name in paths]
