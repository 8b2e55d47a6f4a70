"""PNG plots of the forecaster backtest (``greenserve bench forecaster --plots DIR``).

Pictures a reader would rather look at than read off the JSON: the MAPE at every horizon
1-48 h, chosen model against the two baselines, averaged over each region set (EIA 2022,
Electricity Maps 2024) and region by region; and per region the day-ahead forecast laid
end to end over the last weeks of the test span, with its p10-p90 band, the template +
level baseline and what happened; and the coverage of both p10-p90 bands per region
against the nominal 80 %.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from greenserve.bench.forecaster.backtest import CURVE_MODELS, BacktestResult
from greenserve.bench.forecaster.day_ahead import DayAheadSeries
from shared.metrics.plots import save_figure

__all__ = [
    "DAY_AHEAD_DAYS",
    "plot_backtest",
    "plot_band_coverage",
    "plot_day_ahead",
    "plot_mape_by_horizon",
    "plot_region_curves",
]

FloatArray = npt.NDArray[np.float64]

DAY_AHEAD_DAYS = 21
"""Days of the test span's end shown in each day-ahead plot (hourly detail stays legible)."""
EIA_DAY1_GOAL_PCT = 5.5
"""Issue 6's goal for the EIA day-1 mean MAPE, drawn on the EIA panel."""
_LABELS = {
    "chosen": "GreenServe (blend)",
    "template_level": "template + level",
    "same_hour_yesterday": "same hour yesterday",
}
_SETS = (("eia:", "EIA 2022 (test Aug-Dec)"), ("em:", "Electricity Maps 2024"))


def plot_mape_by_horizon(results: Mapping[str, BacktestResult], path: Path) -> Path:
    """One panel per region set present: mean MAPE per horizon of each curve model."""
    from shared.metrics.headless import plt

    sets = [(p, title) for p, title in _SETS if any(n.startswith(p) for n in results)]
    if not sets:  # regions named without a set prefix: one panel for all
        sets = [("", "all regions")]
    fig, axes = plt.subplots(1, len(sets), figsize=(6 * len(sets), 4), squeeze=False)
    for ax, (prefix, title) in zip(axes[0], sets, strict=True):
        chosen = [r for n, r in results.items() if n.startswith(prefix)]
        for model in CURVE_MODELS:
            curve = np.mean([r.mape_by_horizon[model] for r in chosen], axis=0)
            hours = np.arange(1, len(curve) + 1)
            ax.plot(hours, curve, label=_LABELS[model], lw=2 if model == "chosen" else 1.2)
        if prefix == "eia:":
            ax.hlines(
                EIA_DAY1_GOAL_PCT, 1, 24, colors="k", linestyles=":", label="goal: day-1 mean"
            )
        plural = "s" if len(chosen) != 1 else ""
        ax.set_title(f"{title}: mean of {len(chosen)} region{plural}", fontsize=10)
        ax.set_xlabel("horizon (h)")
        ax.set_ylabel("MAPE (%)")
        ax.set_xlim(1, None)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_region_curves(results: Mapping[str, BacktestResult], path: Path) -> Path:
    """Small multiples: each region's MAPE per horizon, chosen model against the baselines.

    The set means hide which regions carry the error; one panel each (a shared horizon
    axis, each its own MAPE scale) shows it.
    """
    from shared.metrics.headless import plt

    columns = min(4, len(results))
    rows = -(-len(results) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(3.6 * columns, 2.6 * rows), squeeze=False, sharex=True
    )
    for ax, (name, result) in zip(axes.flat, results.items(), strict=False):
        for model in CURVE_MODELS:
            curve = result.mape_by_horizon[model]
            hours = np.arange(1, len(curve) + 1)
            ax.plot(hours, curve, label=_LABELS[model], lw=1.6 if model == "chosen" else 1.0)
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(results) :]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("horizon (h)")
    for ax in axes[:, 0]:
        ax.set_ylabel("MAPE (%)")
    axes[0][0].legend(fontsize=7)
    return save_figure(fig, path)


def _broken(
    times: pd.DatetimeIndex, series: Mapping[str, FloatArray]
) -> tuple[FloatArray, dict[str, FloatArray]]:
    """x (matplotlib date numbers, in days) and each series with a NaN wherever hours are
    not contiguous, so a line does not bridge skipped origins."""
    hours = ((times - times[0]) / pd.Timedelta(hours=1)).to_numpy(dtype=np.float64)
    gaps = np.flatnonzero(np.diff(hours) > 1.0) + 1
    # matplotlib's date numbers are days since its epoch, 1970-01-01 by default.
    first = float((times[0] - pd.Timestamp("1970-01-01", tz="UTC")) / pd.Timedelta(days=1))
    x = np.insert(first + hours / 24.0, gaps, np.nan)
    return x, {
        name: np.insert(values.astype(np.float64), gaps, np.nan) for name, values in series.items()
    }


def plot_day_ahead(
    region: str, series: DayAheadSeries, path: Path, days: int = DAY_AHEAD_DAYS
) -> Path:
    """The last ``days`` days of the day-ahead series: actual, blend with band, baseline."""
    from shared.metrics.headless import plt

    keep = series.times >= series.times[-1] - pd.Timedelta(days=days)
    times = series.times[keep]
    fig, ax = plt.subplots(figsize=(12, 4))
    x, y = _broken(
        times,
        {
            "actual": series.actual[keep],
            **{m: series.forecasts[m][keep] for m in ("p10", "p90", "chosen", "template_level")},
        },
    )
    ax.fill_between(x, y["p10"], y["p90"], color="C0", alpha=0.2, label="p10-p90")
    for model, style in (("chosen", "-"), ("template_level", "--")):
        ax.plot(x, y[model], style, lw=1.2, label=_LABELS[model])
    ax.plot(x, y["actual"], color="k", lw=1.0, label="actual")
    ax.set_title(
        f"{region}: day-ahead forecast (origins 00:00 UTC) from {times[0]:%Y-%m-%d}",
        fontsize=10,
    )
    ax.xaxis_date()
    ax.set_xlabel("UTC")
    ax.set_ylabel("gCO2/kWh")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=4)
    return save_figure(fig, path)


def plot_band_coverage(results: Mapping[str, BacktestResult], path: Path) -> Path:
    """Coverage of [p10, p90] per region for the fit's validation band and the recent band
    (``services.forecaster.bands``), with the nominal 0.80 drawn in."""
    from shared.metrics.headless import plt

    names = list(results)
    x = np.arange(len(names), dtype=np.float64)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(names) + 2.0), 4))
    for offset, (band, label) in zip(
        (-0.2, 0.2),
        (("validation", "validation band"), ("recent", "recent band (28 d)")),
        strict=True,
    ):
        values = [results[n].bands[band]["coverage"] for n in names]
        ax.bar(x + offset, values, width=0.4, label=label)
    ax.axhline(0.8, color="k", ls="--", lw=1.0, label="nominal 0.80")
    ax.set_xticks(x, [n.split(":", 1)[-1] for n in names], rotation=45, ha="right")
    ax.set_ylim(0.5, 1.0)
    ax.set_ylabel("share of test hours inside [p10, p90]")
    ax.set_title("p10-p90 coverage on the test span", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_backtest(results: Mapping[str, BacktestResult], out_dir: Path) -> list[Path]:
    """Write the horizon curves (set means, then per region) and one day-ahead plot per
    region; return the paths."""
    paths = [
        plot_mape_by_horizon(results, out_dir / "forecaster_mape_by_horizon.png"),
        plot_region_curves(results, out_dir / "forecaster_mape_by_horizon_regions.png"),
        plot_band_coverage(results, out_dir / "forecaster_band_coverage.png"),
    ]
    for name, result in results.items():
        safe = name.replace(":", "_")
        paths.append(plot_day_ahead(name, result.day_ahead, out_dir / f"day_ahead_{safe}.png"))
    return paths
