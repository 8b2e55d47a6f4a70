"""PNG plot of ``greenserve bench profile-drift --plots DIR``: the clock each controller chose,
averaged per model minute (the emergency step makes single decisions jump between the
filter's clock and the maximum), one panel per order of the two mixes, with the moment the
mix changed and the moment the re-sweeping agent's new profile took over."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np

from shared.metrics.plots import save_figure

__all__ = ["plot_profile_drift"]

STYLES: Final = {
    "swept-once": ("tab:red", "-"),
    "drift-resweep": ("tab:green", "-"),
    "per-phase-profile": ("k", ":"),
}


def plot_profile_drift(orders: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """Write the clock-over-time plot of a profile-drift run to ``path``."""
    from shared.metrics.headless import plt

    fig, axes = plt.subplots(len(orders), 1, figsize=(11, 3.6 * len(orders)), squeeze=False)
    for ax, (name, order) in zip(axes[:, 0], orders.items(), strict=True):
        change = order["_change_s"] / 60.0
        for controller, (colour, style) in STYLES.items():
            clocks = order["_clocks"].get(controller)
            if not clocks:
                continue
            row = order["configs"][controller]
            saved, late = row["energy_saving_pct"], row["late_on_time_at_max_clock_pct"]
            label = f"{controller} ({saved:.1f} % saved; {late:.2f} % late, on time at max)"
            minute = np.array([t for t, _ in clocks]) // 60.0
            decided = np.array([c for _, c in clocks])
            minutes = np.unique(minute)
            means = [decided[minute == m].mean() for m in minutes]
            ax.step(np.append(minutes, minutes[-1] + 1.0), [*means, means[-1]], where="post",
                    color=colour, linestyle=style, linewidth=1.5, label=label)  # fmt: skip
        ax.axvline(change, color="tab:gray", linewidth=1.5, label="mix changes")
        after = order["configs"]["drift-resweep"]["new_profile_after_change_s"]
        if after is not None:
            ax.axvline(change + after / 60.0, color="tab:green", linestyle="--", linewidth=1.0,
                       label="re-swept profile in use")  # fmt: skip
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("model time (min)")
        ax.set_ylabel("mean decided SM clock per minute (MHz)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    return save_figure(fig, path)
