"""The full-size fuzz run: every bad-input property of tests/unit/test_fuzz_api.py and
tests/unit/test_fuzz_server.py at ``--scale`` times its suite example count, with a report of
what was sent and answered.

    python scripts/fuzz.py --scale 14 --seed 17 --out docs/benchmarks/fuzz.md

Each property runs against the whole gateway in-process (real lifespan, real emulated
workers, no sockets): speech bodies, headers, content types, multipart voice uploads,
voice names in paths, admin patches, every route with every method and odd query
strings, long ``data:`` URI headers and multipart uploads without a length; and, through a
127.0.0.1 socket served with ``serve``'s server bounds, huge headers, heads and bodies that
stop, and API keys in query strings (HTTP and the WebSocket handshake) that must reach no
log line. Every answer must come within the call deadline, never be a 5xx, and every
refusal must be the OpenAI error envelope; the report counts requests per endpoint,
statuses, 5xx and hangs, and says whether every property held.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from xml.etree import ElementTree
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROPERTIES = ("tests/unit/test_fuzz_api.py", "tests/unit/test_fuzz_server.py")


def run(scale: float, seed: int | None, log: Path | None) -> tuple[dict[str, Any], int, float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "tally.json"
        junit = Path(tmp) / "junit.xml"
        env = {**os.environ, "HIGGS_FUZZ_SCALE": str(scale), "HIGGS_FUZZ_REPORT": str(report)}
        # The suite's per-test timeout is sized for its bounded counts; every call keeps its
        # own deadline (a hang is still a failure).
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--timeout={int(300 * max(scale, 1))}",
                   f"--junitxml={junit}", *PROPERTIES]  # fmt: skip
        if seed is not None:
            command.append(f"--hypothesis-seed={seed}")
        began = time.monotonic()
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        elapsed = time.monotonic() - began
        tally = json.loads(report.read_text()) if report.exists() else {}
        tally["properties"] = properties(junit)
    if log is not None:
        log.write_text(result.stdout + result.stderr)
    summary = (result.stdout.strip().splitlines() or [""])[-1]
    return tally, result.returncode, elapsed, summary


def properties(junit: Path) -> dict[str, str]:
    """Test name -> "passed" or the first line of why it failed."""
    if not junit.exists():
        return {}
    outcomes: dict[str, str] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        message = "passed" if problem is None else (problem.get("message") or "failed").splitlines()[0][:300]
        outcomes[case.get("name", "?")] = message
    return outcomes


def markdown(tally: dict[str, Any], returncode: int, elapsed: float, summary: str, command: str, scale: float) -> str:
    passed = returncode == 0 and tally.get("server_errors") == 0 and tally.get("hangs") == 0
    lines = [
        "# Fuzz: generated bad input on every public endpoint",
        "",
        "Produced by `scripts/fuzz.py` (the properties are `tests/unit/test_fuzz_api.py`; the suite",
        "runs them at their bounded example counts, this run at "
        f"{scale:g} times those counts):",
        "",
        "```sh",
        command,
        "```",
        "",
        f"**Result: {'PASS' if passed else 'FAIL'}.** {tally.get('inputs', 0)} requests in {elapsed:.0f} s; "
        f"5xx: {tally.get('server_errors', 0)}; hangs (no answer within the call deadline): {tally.get('hangs', 0)}; "
        f"properties: `{summary}`.",
        "",
        "| endpoint | requests |",
        "|---|---:|",
    ]
    lines += [f"| `{name}` | {count} |" for name, count in sorted(tally.get("endpoints", {}).items())]
    lines += ["", "| property | outcome |", "|---|---|"]
    lines += [f"| `{name}` | {outcome.replace('|', '/')} |" for name, outcome in tally.get("properties", {}).items()]
    lines += ["", "| status | answers |", "|---|---:|"]
    lines += [f"| {status} | {count} |" for status, count in sorted(tally.get("statuses", {}).items())]
    lines += [
        "",
        "Every answer is checked by the property that sent it: no 5xx, a status from",
        "400/401/404/405/409/413/415 for a client's mistake (408 for a head or body that stops,",
        "431 for a head over the limit; or 200 with audio for a valid request; 307 is the",
        "framework's trailing-slash redirect), the OpenAI error envelope",
        "on every refusal, a safe `x-request-id`. The requests include each property's own",
        "follow-ups (an admin patch is undone and a speech request checks the gateway still",
        "serves).",
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=14.0, help="times each property's suite example count")
    parser.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: random)")
    parser.add_argument("--out", type=Path, default=None, help="markdown report; a .json is written beside it")
    parser.add_argument("--log", type=Path, default=None, help="write pytest's whole output here")
    args = parser.parse_args()
    tally, returncode, elapsed, summary = run(args.scale, args.seed, args.log)
    shown = [f"--scale {args.scale:g}", *([f"--seed {args.seed}"] if args.seed is not None else [])]
    shown += [f"--out {shlex.quote(str(args.out))}"] if args.out is not None else []
    command = "python scripts/fuzz.py " + " ".join(shown)  # --log only picks where pytest's output goes
    text = markdown(tally, returncode, elapsed, summary, command.strip(), args.scale)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
        document = {**tally, "scale": args.scale, "seconds": round(elapsed, 1), "pytest": summary, "passed": returncode == 0}
        args.out.with_suffix(".json").write_text(json.dumps(document, indent=2) + "\n")
    return 0 if returncode == 0 and tally.get("server_errors") == 0 and tally.get("hangs") == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
