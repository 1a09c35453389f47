"""A benchmark result written out: JSON (the source of truth), CSV, a Markdown table, PNG plots.

The JSON document holds the run's parameters and every phase summary; CSV, Markdown and the
plots are derived from it, so a report can be re-rendered (or several combined) later.
matplotlib is an optional dependency (the ``bench`` extra) and is imported lazily with the
headless Agg backend, so the gateway itself never needs it.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

SCHEMA = "higgs-gateway-bench/1"

CSV_COLUMNS = (
    "label", "phase", "sla_class", "concurrency", "offered_rate", "sent", "ok", "errors", "pools",
    "ttfp_mean_ms", "ttfp_p50_ms", "ttfp_p99_ms", "rtf_mean", "rtf_p50", "rtf_p99",
    "e2e_p50_s", "e2e_p99_s", "underrun_p50_ms", "underrun_max_ms", "audio_s", "wall_s", "audio_s_per_s",
    "client_cpu_ms_per_request",
)  # fmt: skip


def load(path: str | Path) -> dict[str, Any]:
    document = json.loads(Path(path).read_text())
    if document.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a {SCHEMA} result")
    return document


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def _flat(value: dict[str, int]) -> str:
    return " ".join(f"{key}:{count}" for key, count in value.items())


def _row(label: str, phase: dict[str, Any], group: dict[str, Any], sla_class: str) -> dict[str, Any]:
    return {
        "label": label,
        "phase": phase["name"],
        "sla_class": sla_class,
        "concurrency": phase.get("concurrency"),
        "offered_rate": phase.get("offered_rate"),
        "sent": group["sent"],
        "ok": group["ok"],
        "errors": _flat(group["errors"]),
        "pools": _flat(group["pools"]),
        "ttfp_mean_ms": _ms(group["ttfp_s"]["mean"]),
        "ttfp_p50_ms": _ms(group["ttfp_s"]["median"]),
        "ttfp_p99_ms": _ms(group["ttfp_s"]["p99"]),
        "rtf_mean": group["rtf"]["mean"],
        "rtf_p50": group["rtf"]["median"],
        "rtf_p99": group["rtf"]["p99"],
        "e2e_p50_s": group["e2e_s"]["median"],
        "e2e_p99_s": group["e2e_s"]["p99"],
        "underrun_p50_ms": _ms(group["underrun_s"]["median"]),
        "underrun_max_ms": _ms(group["underrun_s"]["max"]),
        "audio_s": group["audio_s"],
        "wall_s": group["wall_s"],
        "audio_s_per_s": group["audio_s_per_s"],
        "client_cpu_ms_per_request": phase.get("client_cpu_ms_per_request") if sla_class == "all" else None,
    }


def rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per phase (class ``all``) followed by one per SLA class in it."""
    out: list[dict[str, Any]] = []
    for phase in document["phases"]:
        out.append(_row(document["label"], phase, phase, "all"))
        for name, group in phase.get("by_class", {}).items():
            out.append(_row(document["label"], phase, group, name))
    return out


def to_csv(documents: Iterable[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for document in documents:
        for row in rows(document):
            writer.writerow({key: _csv_value(value) for key, value in row.items()})
    return buffer.getvalue()


def _csv_value(value: Any) -> Any:
    return f"{value:.6g}" if isinstance(value, float) else value


def whole(value: float | None) -> str:
    """A table cell: the value rounded to a whole number, a dash when it is missing."""
    return "–" if value is None else f"{value:.0f}"


def _fmt(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def to_markdown(documents: Sequence[dict[str, Any]], by_class: bool = True) -> str:
    """A table of every phase of every document (the label column tells them apart)."""
    header = (
        "| config | phase | class | sent | ok | errors | pools | TTFP mean / p50 / p99 (ms) | "
        "RTF mean / p50 / p99 | audio-s/s | worst underrun p50 / max (ms) |"
    )
    lines = [header, "|" + "---|" * 11]
    for document in documents:
        for row in rows(document):
            if row["sla_class"] != "all" and not by_class:
                continue
            ttfp = " / ".join(_fmt(row[k], 0) for k in ("ttfp_mean_ms", "ttfp_p50_ms", "ttfp_p99_ms"))
            rtf = " / ".join(_fmt(row[k], 3) for k in ("rtf_mean", "rtf_p50", "rtf_p99"))
            underrun = " / ".join(_fmt(row[k], 0) for k in ("underrun_p50_ms", "underrun_max_ms"))
            lines.append(
                f"| {row['label']} | {row['phase']} | {row['sla_class']} | {row['sent']} | {row['ok']} | "
                f"{row['errors'] or '–'} | {row['pools'] or '–'} | {ttfp} | {rtf} | "
                f"{_fmt(row['audio_s_per_s'], 1)} | {underrun} |"
            )
    return "\n".join(lines) + "\n"


def units_note(time_scale: float) -> str:
    if time_scale == 1.0:
        return "Times are wall-clock as measured by the client."
    return (
        f"Measured against emulated workers at time scale {time_scale:g}; every time, RTF and "
        f"throughput is converted to modelled (H200-equivalent) units (times and RTF divided by "
        f"{time_scale:g}, audio-s/s multiplied by it)."
    )


def write(document: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    """``<stem>.json``, ``<stem>.csv`` and ``<stem>.md`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.json", out_dir / f"{stem}.csv", out_dir / f"{stem}.md"]
    paths[0].write_text(json.dumps(document, indent=2) + "\n")
    paths[1].write_text(to_csv([document]))
    title = f"# {document['label']}: {document['mode']} against {document['url']}\n\n"
    paths[2].write_text(title + units_note(document["time_scale"]) + "\n\n" + to_markdown([document]))
    return paths


# ---- PNG plots ------------------------------------------------------------------------------
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


def plot_sessions(documents: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    plt = _pyplot()
    panels = (
        ("sessions_first_audio", "first audio p50 / p99 (ms, modelled)", "first_audio_s"),
        ("sessions_silence", "sentence silence p99 (ms, modelled)", "sentence_silence_s"),
    )
    paths = []
    for stem, title, metric in panels:
        figure, axes = plt.subplots(figsize=(7, 4))
        for document in documents:
            xs = [p["sessions"] for p in document["phases"]]
            p99 = [(p[metric]["p99"] or 0) * 1000 for p in document["phases"]]
            (line,) = axes.plot(xs, p99, marker="o", label=f"{document['label']} p99")
            if metric == "first_audio_s":
                p50 = [(p[metric]["median"] or 0) * 1000 for p in document["phases"]]
                axes.plot(xs, p50, marker=".", linestyle="--", color=line.get_color(), label=f"{document['label']} p50")
        axes.set_xlabel("concurrent sessions")
        axes.set_title(title)
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize="small")
        path = out / f"{stem}.png"
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)
        paths.append(path)
    return paths
