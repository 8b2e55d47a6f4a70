"""PNG plot of the clock-control bench (``greenserve bench dvfs --plots DIR``).

One panel per setting (FREESH Table 10, throttLL'eM): every policy as a point of energy
saved against max clock by requests late, so the trade-off reads at a glance (up and left
is better), with the papers' figures drawn in where they give one; a third panel holds
each policy's mean clock in both settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from shared.metrics.plots import save_figure

__all__ = ["plot_dvfs"]

FAMILIES: Final = (
    ("fixed", "k", "s"),
    ("miad", "tab:blue", "o"),
    ("predictive", "tab:green", "^"),
    ("profile", "tab:orange", "D"),
)
"""Row-name prefix → colour and marker."""
SETTINGS: Final = (("freesh_table10", "FREESH Table 10 (SS, E2E 7 s)"),
                   ("throttllem", "throttLL'eM (conv trace at max load)"))  # fmt: skip


def _style(name: str) -> tuple[str, str]:
    for prefix, colour, marker in FAMILIES:
        if name.startswith(prefix):
            return colour, marker
    return "tab:gray", "x"


def plot_dvfs(report: Mapping[str, Any], path: Path) -> Path:
    """Write the trade-off plot of a ``bench dvfs`` report to ``path``."""
    from shared.metrics.headless import plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 5), squeeze=False)
    for ax, (key, title) in zip(axes[0][:2], SETTINGS, strict=True):
        configs: Mapping[str, Mapping[str, Any]] = report[key]["configs"]
        for name, row in configs.items():
            colour, marker = _style(name)
            late, saved = row["violation_pct"], row["energy_saving_pct"]
            ax.scatter([late], [saved], color=colour, marker=marker, s=40, zorder=3)
            ax.annotate(name, (late, saved), fontsize=7, xytext=(4, 3),
                        textcoords="offset points")  # fmt: skip
        ax.set_xscale("symlog", linthresh=0.1)
        ax.set_xlabel("requests late (%)")
        ax.set_ylabel("energy saved vs max clock (%)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    freesh, throttllem = axes[0][0], axes[0][1]
    summary = report.get("summary", {})
    if "paper_miad_energy_saving_pct" in summary:
        paper = ([summary["paper_miad_violation_pct"]], [summary["paper_miad_energy_saving_pct"]])
        freesh.scatter(*paper, facecolors="none", edgecolors="tab:blue", marker="o", s=70,
                       label="paper MIAD (2.0, 100)")  # fmt: skip
        freesh.legend(fontsize=7, loc="lower right")
    if "paper_predictive_energy_saving_pct" in summary:
        throttllem.axhline(summary["paper_predictive_energy_saving_pct"], color="tab:green",
                           ls=":", label="paper: mean saving, p99 within SLO")  # fmt: skip
        throttllem.legend(fontsize=7, loc="lower right")
    clocks = axes[0][2]
    names = list(report["freesh_table10"]["configs"])
    names += [n for n in report["throttllem"]["configs"] if n not in names]
    width = 0.4
    for offset, (key, title) in zip((-width / 2, width / 2), SETTINGS, strict=True):
        configs = report[key]["configs"]
        heights = [configs[n]["mean_clock_mhz"] if n in configs else 0.0 for n in names]
        clocks.bar([i + offset for i in range(len(names))], heights, width,
                   label=title.split(" (")[0])  # fmt: skip
    clocks.set_xticks(range(len(names)))
    clocks.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
    clocks.set_ylabel("time-weighted mean clock (MHz)")
    clocks.set_title("mean clock", fontsize=10)
    clocks.legend(fontsize=7)
    return save_figure(fig, path)
