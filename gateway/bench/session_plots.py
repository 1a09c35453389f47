"""PNG plots of ``bench sessions`` documents: one line per setup, over the number of sessions."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.bench.plots import _pyplot


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
