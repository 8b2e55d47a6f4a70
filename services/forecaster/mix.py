"""Source-production tier: forecast each fuel's generation, derive the intensity from the mix.

CarbonCast (Maji et al., "CarbonCast: multi-day forecasting of grid carbon intensity",
BuildSys 2022; not among the project's seed digests) forecasts the production of every
source first and then computes the average carbon intensity of the forecast mix with
per-source emission factors:

    CI(t) = sum_f EF_f * MW_f(t) / sum_f MW_f(t).                                  (1)

Here the per-source forecasts are cheap and causal: the README's template + level model
(:func:`services.forecaster.baselines.template_plus_level`) run on each fuel's MW, clipped
at 0, reading ``generation[:o]`` only, as every other model does. Note that (1) is not
linear in the MW, so the result differs from template + level on the intensity itself;
on *shares* template + level would give exactly template + level of the intensity back,
because (1) is linear in the shares.

The factors ``EF_f`` are fitted per region by non-negative least squares of
``CI * total MW`` on the per-fuel MW (:func:`fit_emission_factors`), on the fitting span
only. On the EIA-930 files this fit is exact: every balancing authority's ``avg_CI`` is
(1) with the same fixed factors (WND 11, SUN 41, WAT 24, OIL 650, NG 490, COL 820, NUC 12,
OTH 230 g/kWh; residual below 1e-9 g/kWh), so the derived intensity carries no error of
its own beyond the mix forecast's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from services.forecaster.baselines import template_plus_level
from services.forecaster.features import HourlyGrid

__all__ = [
    "EmissionFactors",
    "fit_emission_factors",
    "forecast_generation",
    "forecast_shares",
    "mix_forecast",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class EmissionFactors:
    """Per-fuel emission factors of one region, fitted by :func:`fit_emission_factors`."""

    names: tuple[str, ...]
    """Fuel columns, in the order of :attr:`HourlyGrid.generation`."""
    factors: tuple[float, ...]
    """gCO2/kWh per fuel; 0 for a fuel that never generated in the fitting span (its factor
    is not identified there)."""
    mean_abs_error: float
    """Mean |CI - CI from (1)| over the fitting rows, gCO2/kWh."""
    max_abs_error: float
    """Largest such error, gCO2/kWh."""
    rows: int
    """Hours used (observed intensity, positive total generation)."""

    def intensity(self, generation: FloatArray) -> FloatArray:
        """Average intensity (1) of MW arrays whose last axis is the fuels; NaN where the
        total is not positive."""
        total = generation.sum(axis=-1)
        emitted = generation @ np.asarray(self.factors, dtype=np.float64)
        result: FloatArray = np.where(total > 0, emitted / np.where(total > 0, total, 1.0), np.nan)
        return result


def fit_emission_factors(grid: HourlyGrid, end: int | None = None) -> EmissionFactors | None:
    """Fit (1) by non-negative least squares on the hours ``[0, end)`` of ``grid``.

    Solves ``min ||G ef - CI * total||`` over ``ef >= 0``, with ``G`` the hours x fuels MW
    (gap-filled hours left out). Returns ``None`` when the grid has no generation columns
    or no usable hour.
    """
    from scipy.optimize import nnls

    if not grid.generation_names:
        return None
    stop = len(grid) if end is None else max(0, min(end, len(grid)))
    generation = grid.generation[:stop]
    total = generation.sum(axis=1)
    keep = grid.observed[:stop] & (total > 0) & np.isfinite(total)
    if not keep.any():
        return None
    factors, _ = nnls(generation[keep], grid.y[:stop][keep] * total[keep], maxiter=1000)
    fitted = EmissionFactors(
        names=grid.generation_names,
        factors=tuple(float(f) for f in factors),
        mean_abs_error=0.0,
        max_abs_error=0.0,
        rows=int(keep.sum()),
    )
    error = np.abs(fitted.intensity(generation[keep]) - grid.y[:stop][keep])
    return EmissionFactors(
        names=fitted.names,
        factors=fitted.factors,
        mean_abs_error=float(error.mean()),
        max_abs_error=float(error.max()),
        rows=fitted.rows,
    )


def mix_forecast(
    grid: HourlyGrid, origins: IntArray, horizon_h: int, factors: EmissionFactors
) -> FloatArray:
    """Intensity (1) of the per-fuel template + level MW forecasts, ``(n, H)``.

    Reads ``generation[:o]`` only for origin ``o`` (the conventions of
    :mod:`services.forecaster.baselines`). NaN where every fuel is forecast at 0 MW.

    Raises:
        ValueError: when the grid's fuel columns are not those the factors were fitted on.
    """
    if grid.generation_names != factors.names:
        raise ValueError("grid fuel columns differ from the fitted emission factors'")
    return factors.intensity(forecast_generation(grid, origins, horizon_h))


def forecast_generation(grid: HourlyGrid, origins: IntArray, horizon_h: int) -> FloatArray:
    """Per-fuel template + level MW forecasts, clipped at 0: ``(n, H, G)``; reads
    ``generation[:o]`` only."""
    columns = [
        np.maximum(template_plus_level(grid.generation[:, j], origins, horizon_h), 0.0)
        for j in range(len(grid.generation_names))
    ]
    if not columns:
        return np.zeros((len(origins), horizon_h, 0))
    return np.stack(columns, axis=2)


def forecast_shares(
    grid: HourlyGrid, origins: IntArray, horizon_h: int, names: tuple[str, ...]
) -> FloatArray:
    """Shares of the forecast mix (:func:`forecast_generation`) per fuel of ``names``,
    ``(n, H, len(names))``; NaN where the grid has no such generation columns (a pooled
    history with shares only) or every fuel is forecast at 0 MW."""
    if not names or grid.generation_names != names:
        return np.full((len(origins), horizon_h, len(names)), np.nan)
    megawatts = forecast_generation(grid, origins, horizon_h)
    total = megawatts.sum(axis=2, keepdims=True)
    result: FloatArray = np.where(total > 0, megawatts / np.where(total > 0, total, 1.0), np.nan)
    return result
