"""The backtest's fit cache: a fitted forecaster stored on disk, keyed by inputs and code.

A cold EIA backtest fits for minutes per refit origin, so fits are kept between runs and a
re-run only re-scores. The key is the region's data (a fingerprint of it and of the related
regions pooled in), the config and a digest of the source of the whole forecaster package
and of this backtest's modules, so an edit to any of them refits instead of reusing a stale
model. The live service's cache (``model_cache``) keys by a version number instead; both
store through :func:`~services.forecaster.model_cache.load_or_fit`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np

import services.forecaster
from services.forecaster.config import ForecasterConfig
from services.forecaster.model_cache import load_or_fit
from services.forecaster.models import CarbonForecaster, SharedFits, fit_forecaster
from services.forecaster.sources import CarbonHistory

__all__ = ["code_digest", "fit_cached", "package_digest"]


def code_digest() -> str:
    """Digest of every module of the forecaster package and of this folder (part of the bench
    cache's key).

    A fixed list of modules missed those split out later (``booster_rows``, ``blend``,
    ``holidays``, ``sun``), so a change there reused a stale cached fit; every module is
    read now, at the price of a refit after any edit to the package. Read once, at import:
    a long bench whose package is edited while it runs must key its fits by the code it
    runs, not by the files on disk at the time of each fit.
    """
    return _CODE_DIGEST


def package_digest(package: Path) -> str:
    """Digest of the names and bytes of every module in ``package``."""
    digest = hashlib.sha256()
    for path in sorted(package.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


# The service's package is what fits; this folder's modules (rolling origins, scores) are
# what the backtest adds around the fit; an edit to either changes what it reports.
_CODE_DIGEST: Final = package_digest(Path(services.forecaster.__file__).parent) + package_digest(
    Path(__file__).parent
)


def _fingerprint(history: CarbonHistory) -> tuple[object, ...]:
    return (
        history.region,
        history.source,
        history.emission_factor,
        str(history.intensity.index[-1]),
        len(history.intensity),
        float(np.nansum(history.intensity.to_numpy())),
    )


def fit_cached(
    history: CarbonHistory,
    config: ForecasterConfig,
    cache_dir: Path | None,
    related: Sequence[CarbonHistory] = (),
    shared: SharedFits | None = None,
) -> tuple[CarbonForecaster, bool]:
    """Fit a forecaster (see :func:`fit_forecaster`), or load the one fitted on the same inputs.

    ``shared`` (not part of the key: it changes the time a fit takes, not its result) is
    passed on to :func:`fit_forecaster`.

    Returns:
        The forecaster and whether it came from the cache.
    """
    key_material = repr(
        (
            _fingerprint(history),
            [_fingerprint(other) for other in related],
            config,
            code_digest(),
        )
    )
    key = f"{history.region}-{hashlib.sha256(key_material.encode()).hexdigest()[:24]}.pkl"
    fitted = False

    def fit() -> CarbonForecaster:
        nonlocal fitted
        fitted = True
        return fit_forecaster(history, config=config, related=related, shared=shared)

    # The live service's cache (model_cache) keys by a version number, so a restart reuses
    # a fit across unrelated edits; the bench keys by the code itself (above). Both store
    # and load through one function: atomic writes, unreadable entries refitted.
    return load_or_fit(cache_dir, key, fit, CarbonForecaster), not fitted
