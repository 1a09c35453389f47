"""Write a benchmark result as JSON (the source of truth), CSV and a Markdown table.

The JSON document holds the run's parameters and every phase summary; CSV and Markdown
are derived from it, so a report can be re-rendered (or several combined) later.
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
