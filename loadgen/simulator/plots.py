"""PNG plots of simulated runs (matplotlib, Agg backend; imported only when plotting).

One figure of time series (power, mean clock, active GPUs, CO2 rate) with one line per
policy, and per policy one figure of latency CDFs (TTFT, TBT, E2E), a line per request
class, SLOs marked, on the same axes for every policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from loadgen.simulator.results import SimResult
from shared.metrics.plots import plot_latency_cdfs

__all__ = ["plot_results"]


def plot_results(results: Sequence[SimResult], out_dir: Path) -> list[Path]:
    """Write ``timeseries.png`` and the latency figures (``latency_cdf.png`` for one policy,
    ``latency_cdf_<policy>.png`` each for several) under ``out_dir``; return the paths."""
    from shared.metrics.headless import plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []

    fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    panels = (
        ("power_w", "power (kW)", 1e-3),
        ("clock_mhz", "mean SM clock (MHz)", 1.0),
        ("active_gpus", "active GPUs", 1.0),
        ("co2_g_per_s", "CO2 rate (kg/h)", 3.6),
    )
    for result in results:
        series = result.series
        if series is None:
            continue
        minutes = np.asarray(series.t_s) / 60.0
        for ax, (key, _, scale) in zip(axes, panels, strict=True):
            ax.plot(
                minutes, np.asarray(getattr(series, key), dtype=float) * scale, label=result.policy
            )
    for ax, (_, label, _) in zip(axes, panels, strict=True):
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper right", fontsize=8)
    axes[-1].set_xlabel("simulated time (min)")
    fig.tight_layout()
    path = out_dir / "timeseries.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)

    slos = next((r.class_slos for r in results if r.class_slos), None)
    paths += plot_latency_cdfs(
        [(r.policy, r.columns) for r in results], out_dir / "latency_cdf.png", slos
    )
    return paths
