"""Latency plots shared by the live replay report and the offline simulator."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from shared.metrics.latency import e2e_s, mean_tbt_s, ttft_s
from shared.metrics.records import RecordColumns

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_latency_cdfs", "save_figure"]


def save_figure(fig: Figure, path: Path) -> Path:
    """Lay out ``fig``, write it to ``path`` (creating the folder) as PNG, close it.

    Log axes get plain tick labels ("4", "0.5", "20"): matplotlib's default writes
    "4 × 10⁰" on an axis spanning less than a decade, which is most latency panels.
    """
    from shared.metrics.headless import plt

    _plain_log_ticks(fig)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _plain_log_ticks(fig: Figure) -> None:
    from matplotlib.ticker import LogFormatter

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() == "log":
                axis.set_major_formatter(LogFormatter())
                axis.set_minor_formatter(LogFormatter(labelOnlyBase=False))


def plot_latency_cdfs(runs: Sequence[tuple[str, RecordColumns]], path: Path) -> Path:
    """Write TTFT/TBT/E2E CDFs per request class, one line per labelled run, to ``path``."""
    from shared.metrics.headless import plt

    classes = sorted({str(c) for _, cols in runs for c in cols.request_class} - {"?"})
    metrics = (("TTFT", ttft_s), ("TBT", mean_tbt_s), ("E2E", e2e_s))
    fig, axes = plt.subplots(
        len(classes) or 1, 3, figsize=(12, 2.2 * max(len(classes), 1)), squeeze=False
    )
    for row, name in enumerate(classes):
        for col, (label, fn) in enumerate(metrics):
            ax = axes[row][col]
            for run_label, columns in runs:
                values = fn(columns.subset(columns.request_class == name))
                values = np.sort(values[np.isfinite(values)])
                if values.size:
                    ax.plot(values, np.arange(1, values.size + 1) / values.size, label=run_label)
            ax.set_xscale("log")
            ax.set_title(f"{name} {label} (s)", fontsize=9)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return save_figure(fig, path)
