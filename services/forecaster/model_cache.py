"""On-disk cache of fitted forecasters, so a restarted forecaster does not refit for a minute.

A fitted model depends on the region, the data source, the regions pooled with it, the
last hour of history it saw, that history's values (a digest), and the code that fitted it
(the version below and a digest of the fitting modules); all of these are in the key, so
a cached model is only ever reused for exactly the fit that made it. Entries are pickles
written atomically. The cache directory belongs to the operator (like the data directory):
never point it at a folder others can write, since unpickling runs code.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import pickle
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Final, TypeVar

import numpy as np
import pandas as pd
import sklearn

from services.forecaster.sources import CarbonHistory

__all__ = ["MODEL_CACHE_VERSION", "cache_key", "code_digest", "data_digest", "load_or_fit"]

MODEL_CACHE_VERSION: Final = 12
"""Bump when the forecasting code changes what a fit produces (2: per-bucket boosters and
inverse-error blend weights replace one booster and the per-bucket pick; 3: 150 boosting
rounds instead of 300; 4: pooled training rows in a fixed member order, so every member of
a pool shares one booster; 5: the day-1 boosters read the source-production features
and a fitted forecaster records its blend members, emission factors and booster inputs;
6: a fitted forecaster records what its booster's ratio is taken against, a field that a
version-5 pickle lacks (a slots dataclass unpickles without it and fails on predict);
7: a fitted forecaster has a ``point_scale``; 8: the fit stores its history's
emission-factor label, and EIA histories are labelled "lifecycle"; 9: a fitted
forecaster names the context regions its booster reads; 10: Electricity Maps fits use the
booster without the booster-base levers, and the key does not name the settings; 11: a fitted
forecaster records whether its booster reads the holiday calendar; 12: and whether it reads
the sun's path, a field a version-11 pickle lacks)."""

logger = logging.getLogger(__name__)

T = TypeVar("T")


_FIT_MODULES: Final = (
    "baselines",
    "blend",
    "booster_rows",
    "config",
    "features",
    "gbm",
    "holidays",
    "mix",
    "models",
    "sources",
    "sun",
)
"""The forecaster modules whose code decides what a fit produces (:func:`code_digest`)."""


@functools.cache
def code_digest() -> str:
    """Digest of the fitting code's source, so an edit that changes a fit is never served a
    pickle of the old code, even where :data:`MODEL_CACHE_VERSION` was not bumped."""
    folder = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in _FIT_MODULES:
        digest.update((folder / f"{name}.py").read_bytes())
    return digest.hexdigest()[:16]


def data_digest(histories: Iterable[CarbonHistory], cut: pd.Timestamp) -> str:
    """Digest of what a fit up to ``cut`` reads of ``histories`` (values, timestamps,
    fuel columns, holiday time zone), so a changed data file refits (a milliseconds' hash)."""
    digest = hashlib.sha256()
    for history in sorted(histories, key=lambda h: h.region):
        part = history.until(cut)
        digest.update(f"{history.region}|{history.holiday_tz}|".encode())
        digest.update(pd.DatetimeIndex(part.intensity.index).asi8.tobytes())
        digest.update(np.ascontiguousarray(part.intensity.to_numpy(dtype=np.float64)).tobytes())
        for frame in (part.fuel_mix, part.generation):
            if frame is not None:
                digest.update(",".join(map(str, frame.columns)).encode())
                digest.update(np.ascontiguousarray(frame.to_numpy(dtype=np.float64)).tobytes())
    return digest.hexdigest()[:16]


def cache_key(
    region: str, source: str, pooled: Sequence[str], cut: pd.Timestamp, data: str = ""
) -> str:
    """File name of the model fitted on ``region``'s history up to ``cut``; ``data`` is the
    :func:`data_digest` of the histories the fit reads."""
    ident = "|".join(
        [
            region,
            source,
            ",".join(sorted(pooled)),
            cut.isoformat(),
            sklearn.__version__,
            code_digest(),
            data,
        ]
    )
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    return f"{region}-v{MODEL_CACHE_VERSION}-{digest}.pkl"


def load_or_fit(folder: Path | None, key: str, fit: Callable[[], T], kind: type[T]) -> T:
    """The cached ``kind`` for ``key``, or ``fit()`` stored under it (``folder`` None: no cache).

    An unreadable or foreign entry is refitted and replaced, never trusted.
    """
    if folder is None:
        return fit()
    path = folder / key
    if path.exists():
        try:
            with path.open("rb") as handle:
                model = pickle.load(handle)  # operator-owned cache, see the module doc
            if isinstance(model, kind):
                return model
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
            logger.warning("ignoring unreadable cached model %s: %s", path, exc)
    model = fit()
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(model, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return model
