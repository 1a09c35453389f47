"""``higgs-gateway acceptance``: one command that revalidates a GPU fleet.

Starts one worker at a time through the gateway's supervisor (exactly the launch the
gateway uses: ``vllm-omni serve`` with the bundled deploy profiles): the low-latency profile
with native FlashInfer decode, the same with ``attention_config.use_trtllm_attention: true``
(the TRT-LLM XQA path), and the high-throughput profile. Each is swept c1…c64 (up to its
``max_num_seqs``) and its audio scored at every level; the report in ``--out`` says TTFP and
RTF per decode path and profile, where the curves cross, the quality per profile and one
PASS/FAIL line per check, beside the curves in ``tune``'s format and the thresholds.

``--emulate`` runs the same against emulated workers (no GPU, a few minutes), and also
checks the numbers against the emulator's calibration. Exit status 0 when every check passed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import tempfile
from pathlib import Path

from gateway.acceptance.checks import checks
from gateway.acceptance.measure import VariantResult, measure_variant
from gateway.acceptance.report import markdown, tune_document, write
from gateway.acceptance.variants import VARIANTS, launch_for
from gateway.bench.arguments import int_list
from gateway.bench.tune import find_crossover
from gateway.bench.tune import curve
from gateway.config import DEFAULT_MODEL, QualityConfig
from gateway.help_format import HelpFormatter
from gateway.quality.service import floors_of
from gateway.types import PoolName

DEFAULT_LEVELS = "1,2,4,8,16,32,64"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="higgs-gateway acceptance", description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="directory for the report, curves and thresholds")
    parser.add_argument("--emulate", action="store_true", help="emulated workers instead of vllm-omni (no GPU)")
    parser.add_argument("--gpu", default="0", help="the GPU each worker runs on, one after another (CUDA_VISIBLE_DEVICES)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="the model vllm-omni serves (weights already local)")
    parser.add_argument("--levels", type=int_list, default=int_list(DEFAULT_LEVELS), help="concurrency levels")
    parser.add_argument("--requests", type=int, default=None, help="requests per level (default max(32, 4 x level))")
    parser.add_argument("--time-scale", type=float, default=0.25, help="with --emulate: the emulator's time scale")
    parser.add_argument("--start-timeout", type=float, default=1800.0, help="seconds a real worker may take to load")
    parser.add_argument("--variants", default=",".join(v.name for v in VARIANTS), help="which variants to run")
    parser.add_argument("--data-dir", type=Path, default=None, help="workers' logs and voices (default: a temporary one)")
    parser.add_argument("--no-progress", action="store_true")
    return parser


async def run(args: argparse.Namespace, data_dir: Path) -> dict[str, VariantResult]:
    time_scale = args.time_scale if args.emulate else 1.0
    wanted = set(args.variants.split(","))
    results: dict[str, VariantResult] = {}
    for variant in VARIANTS:
        if variant.name not in wanted:
            continue
        print(f"acceptance: {variant.name} ({variant.decode_path})", file=sys.stderr)
        launch = launch_for(variant, gpu=args.gpu, emulate=args.emulate, time_scale=time_scale, model=args.model,
                            start_timeout_s=args.start_timeout)  # fmt: skip
        results[variant.name] = await measure_variant(
            variant, launch, data_dir, levels=args.levels, requests=args.requests, time_scale=time_scale,
            floors=floors_of(QualityConfig()), served_model=args.model, progress=not args.no_progress,
        )  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.time_scale <= 0:
        raise SystemExit("--time-scale must be positive")
    wanted = set(args.variants.split(","))
    if not {"low_latency", "high_throughput"} <= wanted or not wanted <= {v.name for v in VARIANTS}:
        print(f"--variants: both low_latency and high_throughput, of {', '.join(v.name for v in VARIANTS)}", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="acceptance-") as scratch:
        results = asyncio.run(run(args, args.data_dir or Path(scratch)))
    # A busy machine inflates every emulated time (and a shared GPU host's clients): say how busy.
    machine = f"Load average (1 min) of the machine running the command: {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end."
    tune = tune_document(results)
    measurements = tune["measurements"]
    crossover = find_crossover(curve(measurements[PoolName.LOW_LATENCY.value], "rtf"), curve(measurements[PoolName.HIGH_THROUGHPUT.value], "rtf"))
    found = checks(results, crossover, args.emulate)
    command = "higgs-gateway acceptance " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[2:]))
    text = markdown(results, tune, found, command=command, emulated=args.emulate,
                    time_scale=args.time_scale if args.emulate else 1.0, machine=machine)  # fmt: skip
    paths = write(args.out, results, tune, found, text)
    print(text)
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
    return 0 if all(c.passed for c in found) else 1
