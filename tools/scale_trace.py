"""Write an Azure-format trace with its lengths scaled or its arrivals jittered.

The robustness checks of docs/simulator.md ("Another length mix") run the default on a trace
it was not tuned on, made from conv's arrival times with longer prompts and shorter outputs::

    python tools/scale_trace.py --trace conv --prompt-scale 2.5 --output-scale 0.6 \\
        --out /tmp/conv_longmix.csv
    greenserve bench cluster --trace /tmp/conv_longmix.csv --window 600:1800 --json \\
        --no-options

``--jitter-s J --seed N`` delays every arrival by a seeded uniform draw in [0, J) seconds:
the same traffic drawn again at the scale of a few seconds, for how much of a figure is
the draw (docs/simulator.md)::

    python tools/scale_trace.py --trace code --jitter-s 1 --seed 3 --out /tmp/code_j3.csv
    greenserve bench cluster --trace /tmp/code_j3.csv --json --no-options

Scaled lengths are rounded down and kept at least 1; ``--max-prompt`` caps prompts (a prompt
beyond the model's context is still a counted refusal in the bench). Without jitter the arrival
times are the source's; the row order always is.
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    """Read the trace, scale its lengths, write the copy; print how many rows were written."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trace", default="conv", help="Azure-format CSV or alias")
    parser.add_argument("--prompt-scale", type=float, default=1.0)
    parser.add_argument("--output-scale", type=float, default=1.0)
    parser.add_argument("--max-prompt", type=int, default=None)
    parser.add_argument("--jitter-s", type=float, default=0.0, help="delay arrivals by U[0, J)")
    parser.add_argument("--seed", type=int, default=0, help="seed of --jitter-s")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    if args.prompt_scale <= 0 or args.output_scale <= 0:
        parser.error("scales must be positive")
    if args.jitter_s < 0:
        parser.error("--jitter-s must be >= 0")
    rng = random.Random(args.seed)

    from loadgen.traces import resolve_trace

    source = Path(resolve_trace(args.trace))
    written = 0
    with (
        source.open(newline="", encoding="utf-8") as src,
        args.out.open("w", newline="", encoding="utf-8") as dst,
    ):
        rows = csv.reader(src)
        out = csv.writer(dst)
        out.writerow(next(rows))
        for stamp, prompt, output, *rest in rows:
            scaled = max(1, int(int(prompt) * args.prompt_scale))
            if args.max_prompt is not None:
                scaled = min(scaled, args.max_prompt)
            if args.jitter_s > 0:
                stamp = _delayed(stamp, rng.uniform(0.0, args.jitter_s))
            out.writerow([stamp, scaled, max(1, int(int(output) * args.output_scale)), *rest])
            written += 1
    print(f"{written} rows → {args.out}")


def _delayed(stamp: str, seconds: float) -> str:
    """``stamp`` moved ``seconds`` later, parsed as the trace reader parses it (pandas,
    any timestamp form it accepts), written to the nanosecond."""
    import pandas as pd

    return str(pd.Timestamp(stamp) + pd.Timedelta(seconds=seconds))


if __name__ == "__main__":
    main()
