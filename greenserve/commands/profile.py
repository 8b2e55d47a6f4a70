"""``greenserve profile``: sweep serving configurations and write the planner's profile table.

For every mode (GPU type × TP), SM clock and request class it finds the highest QPS that
meets the SLO and records power, E2E, TBT and TTFT there, in the format of FREESH's
``profiles.csv`` plus a ``clock_mhz`` column (the input of ``load_profiles_csv``). The
search and the table are :mod:`shared.engine.profiler`; the backend here is the simulated
engine (:mod:`shared.engine.profile_sim`). Any other backend (an OpenAI-compatible HTTP
endpoint, a real vLLM) plugs in by implementing :class:`shared.engine.profiler.ProfileBackend`.

Example: ``greenserve profile --out profiles_sim.csv --clock-fractions 1,0.75,0.5``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from greenserve.argtypes import fraction, positive_float, positive_floats, positive_int, seed

if TYPE_CHECKING:
    from shared.engine.profiler import ProfileRow, ProfileTarget, RequestClass

# The engine model, the profiler and rich are imported in the functions that use them: the
# CLI imports this module to build its parser, and --help needs none of them.

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "profile"
HELP = "sweep (GPU, TP, clock, load, request class) and write a FREESH-format profile table"

_FREESH_MODES = "A100:2,A100:4,A100:8,H100:4"
"""FREESH's modes m1–m4 (seed 000 Appendix A): A100 TP2/4/8 and H100 TP4, Llama-3-70B."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Sweep, SLO, window and output options."""
    parser.add_argument("--out", type=Path, default=Path("profiles_sim.csv"), help="CSV to write")
    parser.add_argument(
        "--backend",
        choices=("sim",),
        default="sim",
        help="sim: the calibrated engine model in engine time",
    )
    parser.add_argument("--model", default="llama-3-70b")
    parser.add_argument("--modes", default=_FREESH_MODES, help="GPU:TP pairs, comma-separated")
    clocks = parser.add_mutually_exclusive_group()
    clocks.add_argument(
        "--clocks-mhz",
        type=positive_floats,
        default=None,
        metavar="MHZ",
        help="SM clocks, comma-separated",
    )
    clocks.add_argument(
        "--clock-fractions",
        type=positive_floats,
        default="1.0",
        metavar="FRACTIONS",
        help="clocks as fractions of each GPU's maximum (snapped to a step)",
    )
    parser.add_argument("--partitions", default="a,b", help="partitions of freesh/partitions.csv")
    parser.add_argument("--classes", default="SS,SL,LS,LL")
    parser.add_argument(
        "--tbt-ms", type=positive_float, default=150.0, help="TBT limit (FREESH: 150)"
    )
    parser.add_argument(
        "--percentile", type=fraction, default=0.9, help="SLO percentile, in (0, 1)"
    )
    parser.add_argument(
        "--window-s", type=positive_float, default=90.0, help="arrival window (engine s)"
    )
    # The search bisects until the bracket is within this share of its top: 0 never ends.
    parser.add_argument(
        "--tolerance", type=fraction, default=0.05, help="relative QPS precision, in (0, 1)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="45 s windows and 10 %% precision: a few seconds, noisier",
    )
    parser.add_argument("--max-num-seqs", type=positive_int, default=256)
    parser.add_argument("--seed", type=seed, default=0)


def _targets(args: argparse.Namespace) -> list[ProfileTarget]:
    from shared.engine.hardware import gpu_spec
    from shared.engine.profiler import ProfileTarget

    targets: list[ProfileTarget] = []
    for pair in args.modes.split(","):
        gpu_name, _, tp = pair.partition(":")
        gpu = gpu_spec(gpu_name)
        short = gpu.name.split("-")[0]
        if args.clocks_mhz:
            clocks = sorted({gpu.snap_clock(c) for c in args.clocks_mhz}, reverse=True)
        else:
            fractions = args.clock_fractions
            clocks = sorted(
                {gpu.snap_clock(f * gpu.max_clock_mhz) for f in fractions}, reverse=True
            )
        targets.extend(
            ProfileTarget(gpu_type=short, tp=int(tp), model=args.model, clock_mhz=c) for c in clocks
        )
    return targets


def _classes(args: argparse.Namespace) -> list[RequestClass]:
    from shared.engine.profiler import load_request_classes
    from shared.paths import data_path

    wanted_partitions = set(args.partitions.split(","))
    wanted_classes = set(args.classes.split(","))
    every = load_request_classes(
        data_path("traces", "AzureLLMInferenceTrace_conv.csv"),
        data_path("freesh", "partitions.csv"),
    )
    return [c for c in every if c.partition in wanted_partitions and c.name in wanted_classes]


def run(args: argparse.Namespace) -> int:
    """Run the sweep with a progress bar on stderr and write the table; 0 on success."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from shared.engine.profile_sim import SimulatedProfileBackend, SimWindow
    from shared.engine.profiler import (
        DEFAULT_TTFT_MS_BY_CLASS,
        ProfileSlo,
        profile_sweep,
        write_profile_csv,
    )

    try:
        targets = _targets(args)
    except ValueError as error:
        print(f"profile: {error}", file=sys.stderr)
        return 2
    classes = _classes(args)
    if not targets or not classes:
        print("profile: nothing to sweep (check --modes, --partitions, --classes)", file=sys.stderr)
        return 2
    window = SimWindow(window_s=45.0 if args.quick else args.window_s, seed=args.seed)
    backend = SimulatedProfileBackend(window=window, max_num_seqs=args.max_num_seqs)
    slo = ProfileSlo(
        ttft_ms_by_class=dict(DEFAULT_TTFT_MS_BY_CLASS),
        tbt_ms=args.tbt_ms,
        percentile=args.percentile,
    )
    console = Console(stderr=True)
    started = time.perf_counter()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task("profiling", total=len(targets) * len(classes))

        def on_point(target: ProfileTarget, cls: RequestClass, row: ProfileRow | None) -> None:
            shown = "unsupported" if row is None else f"max {row.max_qps:g} qps"
            progress.update(
                task,
                advance=1,
                description=(
                    f"{target.mode} @{target.clock_mhz:g} MHz {cls.partition}/{cls.name}: {shown}"
                ),
            )

        rows = profile_sweep(
            backend,
            targets,
            classes,
            slo=slo,
            relative_tolerance=0.1 if args.quick else args.tolerance,
            on_point=on_point,
        )
    write_profile_csv(args.out, rows)
    console.print(f"wrote {len(rows)} rows to {args.out} in {time.perf_counter() - started:.1f} s")
    return 0
