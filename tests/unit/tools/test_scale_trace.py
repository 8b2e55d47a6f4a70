"""``tools/scale_trace.py``: a jittered copy is the same traffic, each arrival a little later."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from loadgen.traces import read_azure_trace

TOOL = Path(__file__).parents[3] / "tools" / "scale_trace.py"
ROWS = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:17:03.9799600,4808,10\n"
    "2023-11-16 18:17:04.0319600,3180,8\n"
    "2023-11-16 18:17:09.5000000,120,300\n"
    "2023-11-16 18:17:59.9999999,60,2\n"
)


def _jitter(tmp_path: Path, source: Path, seed: int, jitter_s: float) -> Path:
    out = tmp_path / f"jittered_{seed}_{jitter_s}.csv"
    subprocess.run(
        [sys.executable, str(TOOL), "--trace", str(source), "--jitter-s", str(jitter_s),
         "--seed", str(seed), "--out", str(out)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return out


def test_jitter_delays_every_arrival_within_the_bound_and_keeps_the_lengths(
    tmp_path: Path,
) -> None:
    """Test that each row keeps its lengths and moves later by less than the bound, that a
    seed reproduces its copy and another seed draws another."""
    source = tmp_path / "trace.csv"
    source.write_text(ROWS)
    first = _jitter(tmp_path, source, seed=1, jitter_s=1.0)
    again = _jitter(tmp_path, source, seed=1, jitter_s=1.0)
    other = _jitter(tmp_path, source, seed=2, jitter_s=1.0)
    assert first.read_text() == again.read_text()
    assert first.read_text() != other.read_text()
    rows = [line.split(",") for line in ROWS.splitlines()[1:]]
    moved = [line.split(",") for line in first.read_text().splitlines()[1:]]
    assert [r[1:] for r in moved] == [r[1:] for r in rows]
    original = read_azure_trace(source).requests
    jittered = read_azure_trace(first).requests
    # Offsets are from each file's earliest arrival, so compare gaps to the first row's.
    shift = [j.t_s - o.t_s for o, j in zip(original, jittered, strict=True)]
    assert all(abs(s - shift[0]) < 1.0 for s in shift)
    assert len({round(s, 6) for s in shift}) > 1


def test_no_jitter_keeps_the_timestamps(tmp_path: Path) -> None:
    """Test that without ``--jitter-s`` the timestamps are the source's, character for
    character (the length-mix copies of docs/simulator.md depend on it)."""
    source = tmp_path / "trace.csv"
    source.write_text(ROWS)
    same = _jitter(tmp_path, source, seed=1, jitter_s=0.0)
    assert same.read_text().splitlines() == ROWS.splitlines()
