"""PNG plots of ``greenserve bench engine-clock --plots DIR``: energy and latency vs SM clock,
the engine's curves beside the measured points.

- ``engine_clock_table_i.png``: DynamoLLM Table I, one panel per class, energy of each TP
  relative to its own value at the maximum clock (the paper's Wh have an unknown
  normalisation, so shapes are compared, not levels); paper points dashed, engine solid,
  engine cells that miss the SLO hollow.
- ``engine_clock_throttllem.png``: throttLL'eM's A100 characterisation, tokens per joule,
  TBT and power relative to the maximum clock over the whole clock range, with the paper's
  points at 1,050 MHz and its 840 MHz limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from shared.metrics.plots import save_figure

__all__ = ["plot_table_i", "plot_throttllem"]

TP_COLOURS: Final = {2: "tab:blue", 4: "tab:orange", 8: "tab:green"}


def plot_table_i(table_i: Mapping[str, Any], clocks: tuple[float, ...], path: Path) -> Path:
    """Write the Table I panels (relative energy vs clock, paper vs engine) to ``path``."""
    from shared.metrics.headless import plt

    fig, axes = plt.subplots(3, 3, figsize=(12, 10), sharex=True)
    ghz = [c / 1000.0 for c in clocks]
    for ax, (name, row) in zip(axes.flat, table_i.items(), strict=True):
        for tp, colour in TP_COLOURS.items():
            key = f"tp{tp}"
            paper = row["paper_wh"][key]
            if paper[-1] is not None:
                points = [(g, v / paper[-1]) for g, v in zip(ghz, paper, strict=True) if v]
                ax.plot([g for g, _ in points], [v for _, v in points], "--o", color=colour,
                        markersize=5, label=f"paper TP{tp}")  # fmt: skip
            engine = row["engine_wh"][key]
            feasible = row["engine_feasible"][key]
            if engine[-1]:
                rel = [None if v is None else v / engine[-1] for v in engine]
                ax.plot(ghz, rel, "-", color=colour, linewidth=1.2, label=f"engine TP{tp}")
                for g, v, ok in zip(ghz, rel, feasible, strict=True):
                    if v is not None:
                        ax.plot(g, v, "s", color=colour, markersize=5,
                                markerfacecolor=colour if ok else "none")  # fmt: skip
        ax.set_title(f"{name} (rho {row['spearman'] or float('nan'):.2f})", fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("SM clock (GHz)")
    for ax in axes[:, 0]:
        ax.set_ylabel("energy / energy at 1.98 GHz")
    axes[0, 0].legend(fontsize=7)
    return save_figure(fig, path)


def plot_throttllem(
    sweep: Mapping[float, tuple[float, float, float]], paper: Any, path: Path
) -> Path:
    """Write the A100 sweep (tokens/J, TBT, power relative to max clock) to ``path``."""
    from shared.metrics.headless import plt

    top = sweep[paper.max_clock_mhz]
    clocks = sorted(sweep)
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(clocks, [sweep[c][0] / top[0] for c in clocks], color="tab:green",
            label="engine tokens/J")  # fmt: skip
    ax.plot(clocks, [sweep[c][1] / top[1] for c in clocks], color="tab:red", label="engine TBT")
    ax.plot(clocks, [sweep[c][2] / top[2] for c in clocks], color="tab:blue", label="engine power")
    at = paper.sweet_spot_mhz
    ax.plot(at, 1.0 + paper.tokens_per_joule_gain_pct_at_1050 / 100.0, "o", color="tab:green",
            markersize=9, markerfacecolor="none", label="paper tokens/J (+37.4 %)")  # fmt: skip
    ax.plot(at, 1.0 + paper.tbt_increase_pct_at_1050 / 100.0, "o", color="tab:red",
            markersize=9, markerfacecolor="none", label="paper TBT (+5.41 %)")  # fmt: skip
    ax.plot(at, 0.9375 / 1.374, "o", color="tab:blue", markersize=9, markerfacecolor="none",
            label="paper power (0.682)")  # fmt: skip
    ax.axvline(at, color="tab:gray", linestyle="--", linewidth=1.0, label="paper sweet spot")
    ax.axvline(paper.worse_below_mhz, color="tab:gray", linestyle=":", linewidth=1.0,
               label="paper: worse below 840 MHz")  # fmt: skip
    ax.set_ylim(0.0, 3.0)
    ax.set_xlabel("SM clock (MHz)")
    ax.set_ylabel("relative to 1,410 MHz")
    ax.set_title("throttLL'eM A100 characterisation: Llama2-13B TP2, batch 32", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    return save_figure(fig, path)
