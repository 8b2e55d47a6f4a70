"""Write an Azure-format trace with every prompt and output length scaled: another length mix.

The robustness checks of docs/simulator.md ("Another length mix") run the default on a trace
it was not tuned on, made from conv's arrival times with longer prompts and shorter outputs::

    python tools/scale_trace.py --trace conv --prompt-scale 2.5 --output-scale 0.6 \\
        --out /tmp/conv_longmix.csv
    greenserve bench cluster --trace /tmp/conv_longmix.csv --window 600:1800 --json \\
        --no-options

Scaled lengths are rounded down and kept at least 1; ``--max-prompt`` caps prompts (a prompt
beyond the model's context is still a counted refusal in the bench). Arrival times and the
row order are the source's.
"""

from __future__ import annotations

import argparse
import csv
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
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    if args.prompt_scale <= 0 or args.output_scale <= 0:
        parser.error("scales must be positive")

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
            out.writerow([stamp, scaled, max(1, int(int(output) * args.output_scale)), *rest])
            written += 1
    print(f"{written} rows → {args.out}")


if __name__ == "__main__":
    main()
