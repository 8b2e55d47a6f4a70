"""The forecaster's blender: inverse-error or MAPE-fitted weights per horizon bucket, the
MAPE-optimal point scale and the residual quantiles behind p10/p90, all fitted on
validation rows.

Pure numpy on ``(origins, horizons)`` arrays; :func:`services.forecaster.models.fit_forecaster`
feeds it the candidates' validation forecasts.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from services.forecaster.config import BUCKETS, CANDIDATES
from services.forecaster.features import log_ratio

__all__ = [
    "blend",
    "blend_weights",
    "log_quantiles",
    "mape_by_horizon",
    "mape_scale",
    "stacked_weights",
]

FloatArray = npt.NDArray[np.float64]


def mape_by_horizon(forecast: FloatArray, actual: FloatArray, mask: FloatArray) -> FloatArray:
    """Return MAPE (%) per horizon column over rows where ``mask`` is 1; floor 1 g/kWh."""
    errors = np.abs(forecast - actual) / np.maximum(np.abs(actual), 1.0) * mask
    counts = np.maximum(mask.sum(axis=0), 1.0)
    result: FloatArray = 100.0 * errors.sum(axis=0) / counts
    return result


def blend(
    predictions: dict[str, FloatArray],
    weights: FloatArray,
    candidates: Sequence[str] = CANDIDATES,
) -> FloatArray:
    """Weighted sum of the candidates, per horizon column.

    A candidate that has no value at a point (NaN: the source-production member where a
    history has no generation data) is left out there and the other weights renormalised.
    """
    horizon = weights.shape[0]
    blended = np.zeros_like(predictions[candidates[0]][:, :horizon])
    total = np.zeros_like(blended)
    complete = True
    for k, name in enumerate(candidates):
        values = predictions[name][:, :horizon]
        known = np.isfinite(values)
        complete = complete and bool(known.all())
        weight = np.where(known, weights[None, :, k], 0.0)
        blended += weight * np.where(known, values, 0.0)
        total += weight
    if complete:
        return blended  # the weights of every row sum to 1 already
    result: FloatArray = np.where(total > 0, blended / np.where(total > 0, total, 1.0), np.nan)
    return result


def blend_weights(
    predictions: dict[str, FloatArray],
    actual: FloatArray,
    mask: FloatArray,
    horizon_h: int,
    power: float,
    candidates: Sequence[str] = CANDIDATES,
    stack_share: float = 0.0,
) -> tuple[FloatArray, dict[str, list[float]]]:
    """Blend weights per bucket, fitted on validation rows only.

    A bucket's weights are ``MAPE_k ** -power`` normalised over the candidates, a forecast
    combination that is far less noisy than picking the single best candidate on a short
    validation span (the choice then flips with the season). With ``stack_share`` > 0 they
    move that far toward :func:`stacked_weights` (1: the convex weights that minimise the
    bucket's validation MAPE jointly). If the blend does not beat template + level on
    validation in a bucket, that bucket falls back to template + level alone, so no bucket
    is knowingly worse than the README's baseline.
    """
    if not 0.0 <= stack_share <= 1.0:
        raise ValueError("stack_share must be in [0, 1]")
    scores = {name: mape_by_horizon(predictions[name], actual, mask) for name in candidates}
    weights = np.zeros((horizon_h, len(candidates)))
    per_bucket: dict[str, list[float]] = {name: [] for name in (*candidates, "chosen")}
    fallback = np.eye(len(candidates))[list(candidates).index("template_level")]
    for lo, hi in BUCKETS:
        if lo > horizon_h:
            break
        cols = slice(lo - 1, min(hi, horizon_h))
        errors = np.array([max(float(scores[name][cols].mean()), 1e-6) for name in candidates])
        row = errors**-power
        row = row / row.sum()
        if stack_share > 0.0:
            fitted = stacked_weights(
                [predictions[name][:, cols] for name in candidates], actual[:, cols], mask[:, cols]
            )
            if fitted is not None:
                row = (1.0 - stack_share) * row + stack_share * fitted
        weights[cols] = row
        blended = mape_by_horizon(
            blend(predictions, weights, candidates)[:, cols], actual[:, cols], mask[:, cols]
        )
        if float(blended.mean()) >= float(scores["template_level"][cols].mean()):
            weights[cols] = fallback
            blended = scores["template_level"][cols]
        for name, error in zip(candidates, errors, strict=True):
            per_bucket[name].append(round(float(error), 3))
        per_bucket["chosen"].append(round(float(blended.mean()), 3))
    return weights, per_bucket


def stacked_weights(
    members: Sequence[FloatArray], actual: FloatArray, mask: FloatArray
) -> FloatArray | None:
    """Convex weights (``w >= 0``, ``sum w = 1``) minimising the blend's MAPE on these rows.

    The score is :func:`mape_by_horizon`'s averaged over the columns, so a row counts
    ``1 / (|y| n_col)`` with ``n_col`` the observed rows of its column. ``|y - F w|`` is
    split into two non-negative parts ``u - v = y - F w``, which makes the problem a linear
    programme, solved exactly by HiGHS. Rows where a member has no value (NaN) are left
    out. Returns ``None`` when no row is left or the solver fails, so the caller keeps its
    other weights.
    """
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix, hstack, identity, vstack

    stacked = np.stack([m[: actual.shape[0], : actual.shape[1]] for m in members], axis=-1)
    keep = (mask > 0) & np.all(np.isfinite(stacked), axis=-1) & np.isfinite(actual)
    if not keep.any():
        return None
    per_column = np.maximum(keep.sum(axis=0), 1)
    row_cost = (1.0 / (np.maximum(np.abs(actual), 1.0) * per_column[None, :]))[keep]
    f, y = stacked[keep], actual[keep]
    n, k = f.shape
    # Variables: w (k), u (n), v (n). Rows: F w + u - v = y; then sum w = 1.
    upper = hstack([csr_matrix(f), identity(n, format="csr"), -identity(n, format="csr")])
    total = csr_matrix(np.concatenate([np.ones(k), np.zeros(2 * n)])[None, :])
    result = linprog(
        c=np.concatenate([np.zeros(k), row_cost, row_cost]),
        A_eq=vstack([upper, total], format="csr"),
        b_eq=np.concatenate([y, [1.0]]),
        bounds=(0.0, None),
        method="highs",
    )
    if result.status != 0:
        return None
    weights: FloatArray = np.clip(result.x[:k], 0.0, None)
    normalised: FloatArray = weights / weights.sum()
    return normalised


def mape_scale(blended: FloatArray, actual: FloatArray, mask: FloatArray) -> FloatArray:
    """Per-horizon factor ``c`` minimising the bucket's validation MAPE of ``c * blended``.

    ``sum |y - c f| / y = sum (f / y) |y / f - c|``, so ``c`` is the weighted median of
    ``y / f`` with weights ``f / y``, one value per bucket of :data:`BUCKETS`. For a positive
    quantity it lies below the median ratio (about ``exp(-sigma**2)`` for log-normal
    errors): MAPE penalises a forecast above the actual value more, relative to the actual.
    """
    horizon = blended.shape[1]
    scale = np.ones(horizon)
    for lo, hi in BUCKETS:
        if lo > horizon:
            break
        cols = slice(lo - 1, min(hi, horizon))
        f, y = blended[:, cols], actual[:, cols]
        keep = (mask[:, cols] > 0) & np.isfinite(f) & (f > 0) & (y > 0)
        if not keep.any():
            continue
        ratio, weight = y[keep] / f[keep], f[keep] / y[keep]
        order = np.argsort(ratio)
        cumulative = np.cumsum(weight[order])
        scale[cols] = ratio[order][np.searchsorted(cumulative, 0.5 * cumulative[-1])]
    return scale


def log_quantiles(
    blended: FloatArray,
    actual: FloatArray,
    mask: FloatArray,
    pool: int,
) -> FloatArray:
    """``(H, 2)`` p10/p90 of log(actual / forecast) per horizon over the rows' targets where
    ``mask`` > 0, each horizon pooled with ``pool`` on either side ((0, 0) with none): the
    validation band here, the recent band in :mod:`services.forecaster.bands`."""
    horizon = blended.shape[1]
    residual = log_ratio(actual[:, :horizon], blended)
    quantiles = np.zeros((horizon, 2))
    for h in range(horizon):
        cols = slice(max(0, h - pool), min(horizon, h + pool + 1))
        sample = residual[:, cols][mask[:, cols] > 0]
        quantiles[h] = np.quantile(sample, [0.1, 0.9]) if sample.size else (0.0, 0.0)
    return quantiles
