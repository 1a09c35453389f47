"""PNG plots of one or several result documents (one line per configuration).

matplotlib is an optional dependency (the ``bench`` extra) and is imported lazily with
the headless Agg backend, so the gateway itself never needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError("plots need matplotlib: pip install 'higgs-gateway[bench]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(document: dict[str, Any], metric: str, stat: str, scale: float = 1.0) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for phase in document["phases"]:
        value = phase[metric][stat] if isinstance(phase[metric], dict) else phase[metric]
        if phase.get("concurrency") and value is not None:
            xs.append(phase["concurrency"])
            ys.append(value * scale)
    return xs, ys


def _units(documents: Sequence[dict[str, Any]]) -> str:
    scales = {document.get("time_scale", 1.0) for document in documents}
    simulated = all(document.get("notes", {}).get("simulated") for document in documents)
    return "modelled (H200-equivalent)" if scales != {1.0} or simulated else "wall clock"


def plot_sweeps(documents: Sequence[dict[str, Any]], out_dir: Path, prefix: str = "") -> list[Path]:
    """TTFP, RTF and audio throughput against concurrency for every sweep document."""
    sweeps = [d for d in documents if d["mode"] == "sweep"]
    if not sweeps:
        return []
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    units = _units(sweeps)
    # TTFP and RTF span orders of magnitude once queues form: log scale keeps c1 readable.
    charts = [
        ("ttfp", "ttfp_s", 1000.0, "TTFP (ms)", "Time to first packet", ("median", "p99"), "log"),
        ("rtf", "rtf", 1.0, "RTF (end-to-end / audio duration)", "Real-time factor", ("mean", "p99"), "log"),
        ("throughput", "audio_s_per_s", 1.0, "audio seconds per second", "Audio throughput", (None,), "linear"),
    ]
    paths = []
    for stem, metric, scale, ylabel, title, stats, yscale in charts:
        figure, axes = plt.subplots(figsize=(7, 4.5))
        for index, document in enumerate(sweeps):
            color = f"C{index}"
            for stat in stats:
                xs, ys = _series(document, metric, stat or "", scale)
                style = "--" if stat == "p99" else "-"
                name = document["label"] + (f" {stat}" if stat else "")
                axes.plot(xs, ys, style, marker="o", color=color, label=name, markersize=4)
        axes.set_xscale("log", base=2)
        axes.set_yscale(yscale)
        concurrencies = sorted({p["concurrency"] for d in sweeps for p in d["phases"] if p.get("concurrency")})
        axes.set_xticks(concurrencies, [str(c) for c in concurrencies])
        axes.set_xlabel("concurrency (requests in flight)")
        axes.set_ylabel(ylabel)
        axes.set_title(f"{title}, {units}")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
        figure.tight_layout()
        path = out_dir / f"{prefix}{stem}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        paths.append(path)
    return paths


def plot_traces(documents: Sequence[dict[str, Any]], out_dir: Path, prefix: str = "", kind: str | None = None) -> list[Path]:
    """TTFP p50 and p99 per SLA class, one group of bars per configuration (one trace kind)."""
    traces = [d for d in documents if d["mode"] == "trace" and (kind is None or d["params"].get("kind") == kind)]
    if not traces:
        return []
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    classes = sorted({name for d in traces for p in d["phases"] for name in p.get("by_class", {})}) or ["all"]
    figure, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    width = 0.8 / max(1, len(classes))
    for panel, stat in zip(axes, ("median", "p99"), strict=True):
        for index, name in enumerate(classes):
            values = []
            for document in traces:
                phase = document["phases"][0]
                group = phase.get("by_class", {}).get(name, phase if name == "all" else None)
                value = group["ttfp_s"][stat] if group else None
                values.append(float("nan") if value is None else value * 1000)
            positions = [x + index * width for x in range(len(traces))]
            panel.bar(positions, values, width, label=name, color=f"C{index}")
        panel.set_xticks([x + width * (len(classes) - 1) / 2 for x in range(len(traces))], [d["label"] for d in traces])
        panel.set_yscale("log")
        panel.set_ylabel(f"TTFP {stat} (ms, log scale)")
        panel.set_title(f"TTFP {stat} by SLA class, {_units(traces)}", fontsize=10)
        panel.grid(True, axis="y", alpha=0.3)
        panel.legend(fontsize=8)
    figure.tight_layout()
    path = out_dir / f"{prefix}trace_ttfp.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return [path]


def plot_timeline(documents: Sequence[dict[str, Any]], out_dir: Path, kind: str = "ramp", prefix: str = "") -> list[Path]:
    """Throughput, TTFP p99 per class and the low-latency share over a trace, per configuration."""
    traces = [d for d in documents if d["mode"] == "trace" and d["params"].get("kind") == kind
              and d["phases"][0].get("timeline")]  # fmt: skip
    if not traces:
        return []
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    classes = sorted({c for d in traces for row in d["phases"][0]["timeline"] for c in row["ttfp_p99_s"]})
    figure, axes = plt.subplots(2 + len(classes), 1, figsize=(8, 2.4 * (2 + len(classes))), sharex=True)
    for index, document in enumerate(traces):
        rows = document["phases"][0]["timeline"]
        xs = [row["start_s"] for row in rows]
        color = f"C{index}"
        axes[0].plot(xs, [row["audio_s_per_s"] for row in rows], color=color, label=document["label"])
        for panel, name in zip(axes[1:-1], classes, strict=True):
            ys = [row["ttfp_p99_s"].get(name) for row in rows]
            panel.plot(xs, [float("nan") if y is None else y * 1000 for y in ys], color=color)
            panel.set_ylabel(f"{name}\nTTFP p99 (ms)")
            panel.set_yscale("log")
        axes[-1].plot(xs, [row["pool_share"].get("low_latency", 0.0) for row in rows], color=color)
    first = traces[0]["phases"][0]["timeline"]
    window = first[1]["start_s"] - first[0]["start_s"] if len(first) > 1 else 10.0
    offered = [row["sent"] / window for row in first]
    twin = axes[0].twinx()
    twin.fill_between([row["start_s"] for row in first], offered, color="grey", alpha=0.15)
    twin.set_ylabel("offered requests/s (grey)")
    axes[0].set_ylabel("audio-s/s delivered")
    axes[0].set_title(f"{kind} trace over time, {_units(traces)}", fontsize=10)
    axes[0].legend(fontsize=8, loc="upper left")
    axes[-1].set_ylabel("share sent to\nlow-latency")
    axes[-1].set_xlabel("trace time (modelled s)")
    for panel in axes:
        panel.grid(True, alpha=0.3)
    figure.tight_layout()
    path = out_dir / f"{prefix}{kind}_timeline.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return [path]


def plot_profile_changes(document: dict[str, Any], out_dir: Path) -> list[Path]:
    """``bench profile-changes``: routable workers per pool (and the planner's wish), the audio
    delivered and the load over the changing fleet's run, each change shaded."""
    changing = document["changing"]
    samples, rows = changing["samples"], changing["timeline"]
    if not samples or not rows:
        return []
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True)
    xs = [s["at_s"] for s in samples]
    held = changing.get("held_mix") or []
    for index, pool in enumerate(("low_latency", "high_throughput")):
        color, nudge = f"C{index}", 0.05 * (index * 2 - 1)  # the dotted wish beside the solid count
        axes[0].step(xs, [s["routable"].get(pool, 0) for s in samples], where="post", color=color, label=f"{pool} routable")
        if held:
            wish_x = [h["at_s"] for h in held] + [xs[-1]]
            wish_y = [h["mix"].get(pool, 0) + nudge for h in held] + [held[-1]["mix"].get(pool, 0) + nudge]
            axes[0].step(wish_x, wish_y, where="post", color=color, linestyle=":", label=f"{pool} held mix")
        else:
            wished = [float("nan") if not s["desired"] else s["desired"].get(pool, 0) + nudge for s in samples]
            axes[0].step(xs, wished, where="post", color=color, linestyle=":", label=f"{pool} planner")
    ht = document["references"]["ht+ht"]["window"]["audio_s_per_s"]
    starts = [row["start_s"] for row in rows]
    axes[1].step(starts, [row["audio_s_per_s"] for row in rows], where="post", color="C2", label="changing")
    axes[1].axhline(ht, color="grey", linestyle="--", label="ht+ht (static) window")
    axes[2].step(starts, [row["in_flight"] for row in rows], where="post", color="C3")
    for change in changing["changes"]:
        end = change["finished_s"] if change["finished_s"] is not None else xs[-1]
        for panel in axes:
            panel.axvspan(change["started_s"], end, color="orange", alpha=0.2)
    window = changing.get("window")
    if window:
        axes[1].axvspan(window["start_s"], window["start_s"] + window["length_s"], color="green", alpha=0.08)
    axes[0].set_ylabel("workers")
    axes[0].set_title(f"Profile changes under changing load, {_units([document])} (orange: a change)", fontsize=10)
    axes[0].legend(fontsize=7, loc="center right")
    axes[1].set_ylabel("audio-s/s delivered")
    axes[1].legend(fontsize=7, loc="lower right")
    axes[2].set_ylabel("requests in flight")
    axes[2].set_xlabel("time since the load started (modelled s)")
    for panel in axes:
        panel.grid(True, alpha=0.3)
    figure.tight_layout()
    path = out_dir / "timeline.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return [path]
