"""Latency plots shared by the live replay report and the offline simulator."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from shared.metrics.latency import SLO_WINDOW_FACTOR, e2e_s, mean_tbt_s, ttft_s
from shared.metrics.records import FloatArray, RecordColumns
from shared.metrics.summary import ClassSlo

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["latency_figures", "plot_latency_cdfs", "save_figure"]


def save_figure(
    fig: Figure,
    path: Path,
    rect: tuple[float, float, float, float] | None = None,
    *,
    log_labels: bool = True,
) -> Path:
    """Lay out ``fig``, write it to ``path`` (creating the folder) as PNG, close it.

    Log axes get plain tick labels ("4", "0.5", "20"): matplotlib's default writes
    "4 × 10⁰" on an axis spanning less than a decade, which is most latency panels.
    """
    from shared.metrics.headless import plt

    if log_labels:  # False: the caller labelled its log axes itself
        _plain_log_ticks(fig)
    fig.tight_layout(rect=rect)  # ``rect``: the part the axes fill (a legend beside them)
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


_METRICS: Final = (
    ("TTFT", "time to first token (s)"),
    ("TBT", "mean time between tokens (s)"),
    ("E2E", "end-to-end latency ÷ its SLO (5 × its no-queue latency)"),
)


def _latencies(columns: RecordColumns) -> tuple[FloatArray, FloatArray, FloatArray]:
    """TTFT (s), mean TBT (s) and E2E as a fraction of each request's SLO window."""
    e2e_slo = e2e_s(columns) / (SLO_WINDOW_FACTOR * columns.latency_budget_s)
    return ttft_s(columns), mean_tbt_s(columns), e2e_slo


def plot_latency_cdfs(
    runs: Sequence[tuple[str, RecordColumns]],
    path: Path,
    slos: Mapping[str, ClassSlo] | None = None,
) -> list[Path]:
    """Write one latency figure per run (:func:`latency_figures`); return the files.

    One run is written to ``path``; several to ``<stem>_<label>.png`` beside it.
    """
    figures = latency_figures(runs, slos)
    return [
        save_figure(
            fig,
            path if len(runs) == 1 else path.with_name(f"{path.stem}_{_slug(label)}.png"),
            rect=(0.0, 0.0, 0.9, 1.0),  # the legend of classes stands right of the panels
            log_labels=False,
        )
        for label, fig in figures
    ]


def latency_figures(
    runs: Sequence[tuple[str, RecordColumns]], slos: Mapping[str, ClassSlo] | None = None
) -> list[tuple[str, Figure]]:
    """One figure per run: TTFT, TBT and E2E CDFs side by side, a line per request class.

    Every figure has the same axes, so runs compare by flipping between them. TTFT and TBT
    mark each class's target from ``slos`` (dashed, one line per distinct value, naming
    its classes); E2E is drawn as a fraction of each request's own SLO window (FREESH
    Eq. 10: 5 × its no-queue latency Lat: the simulator's of its true output, a live replay's
    of the stack's prediction), so its SLO is the one line at 1. Each CDF is over
    the class's requests that have the value (a one-token request has no TBT; one that
    never finished no E2E), which the legend counts.
    """
    from shared.metrics.headless import plt

    classes = sorted({str(c) for _, cols in runs for c in cols.request_class} - {"?"})
    colours = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(classes)}
    values = [
        {
            name: [np.sort(v[np.isfinite(v) & (v > 0)]) for v in _latencies(_of(cols, name))]
            for name in classes
        }
        for _, cols in runs
    ]
    targets: list[dict[float, list[str]]] = [
        _slo_lines(classes, slos, "ttft_s"),
        _slo_lines(classes, slos, "tbt_s"),
        {1.0: []},
    ]
    limits = [
        _limits([v[name][i] for v in values for name in classes], list(targets[i]))
        for i in range(3)
    ]
    figures: list[tuple[str, Figure]] = []
    for (label, _), by_class in zip(runs, values, strict=True):
        fig, axes = plt.subplots(1, 3, figsize=(16, 5.2), sharey=True)
        for i, ax in enumerate(axes):
            for name in classes:
                v = by_class[name][i]
                if v.size:
                    y = np.arange(1, v.size + 1) / v.size
                    ax.step(v, y, where="post", color=colours[name], lw=1.4, label=name)
            for at, named in targets[i].items():
                ax.axvline(at, color="black", ls="--", lw=1.0, alpha=0.7)
                text = f"SLO {at:g} s" if i < 2 else "SLO"
                if named and len(named) < len(classes):
                    text += f": {' '.join(named)}"
                # Along its line, low down: the CDFs are steep there less often than at the top.
                ax.text(
                    at,
                    0.03,
                    text,
                    rotation=90,
                    ha="right",
                    va="bottom",
                    fontsize=8,
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
                )
            ax.set_xscale("log")
            _one_two_five(ax)
            ax.set_xlim(*limits[i])
            ax.set_ylim(0.0, 1.02)
            ax.set_title(_METRICS[i][0])
            ax.set_xlabel(_METRICS[i][1])
            ax.grid(alpha=0.3, which="both")
        axes[0].set_ylabel("fraction of requests at or below")
        counts = {name: int(by_class[name][0].size) for name in classes}
        handles, _ = axes[0].get_legend_handles_labels()
        fig.legend(
            handles,
            [f"{name} (n={counts[name]})" for name in classes if counts[name]],
            title="request class\n(input, output size)",
            loc="center right",
            fontsize=8,
        )
        fig.suptitle(f"{label}: latency CDFs by request class")
        figures.append((label, fig))
    return figures


def _of(columns: RecordColumns, name: str) -> RecordColumns:
    return columns.subset(columns.request_class == name)


def _limits(series: Sequence[FloatArray], marks: Sequence[float]) -> tuple[float, float]:
    """Log-axis limits holding every run's values and every SLO mark (0.001-1 without
    either)."""
    ends = [float(x) for v in series if v.size for x in (v[0], v[-1])] + list(marks)
    if not ends:
        return 1e-3, 1.0
    low, high = min(ends), max(ends)
    return low / 1.3, max(high * 1.3, low * 2.0)


def _one_two_five(ax: Axes) -> None:
    """Label a log x axis at 1, 2 and 5 of each decade in plain numbers ("0.05", "2"),
    the other minor ticks unlabelled: readable at any span, no "10⁻¹" or "3e-02"."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.xaxis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
    ax.xaxis.set_minor_locator(LogLocator(base=10.0, subs=(3.0, 4.0, 6.0, 7.0, 8.0, 9.0)))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _slo_lines(
    classes: Sequence[str], slos: Mapping[str, ClassSlo] | None, field: str
) -> dict[float, list[str]]:
    """Each distinct target of ``field`` among ``classes`` and the classes it applies to."""
    lines: dict[float, list[str]] = {}
    for name in classes:
        target = getattr((slos or {}).get(name), field, None)
        if target is not None:
            lines.setdefault(float(target), []).append(name)
    return dict(sorted(lines.items()))


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
