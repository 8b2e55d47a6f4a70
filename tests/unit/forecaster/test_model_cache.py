"""Unit tests of the fitted-forecaster cache."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from services.forecaster import model_cache
from services.forecaster.model_cache import (
    MODEL_CACHE_VERSION,
    cache_key,
    data_digest,
    load_or_fit,
)
from tests.factories import intensity_history


@dataclass(frozen=True)
class _Model:
    """Stands for a fitted forecaster (fitting a real one takes seconds)."""

    fitted: int


class _Fits:
    """Counts fits."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> _Model:
        self.count += 1
        return _Model(self.count)


CUT = pd.Timestamp("2022-06-30T23:00", tz="UTC")


def test_a_second_load_reuses_the_stored_model(tmp_path: Path) -> None:
    """Test that the same key fits once and then loads from disk."""
    fits = _Fits()
    key = cache_key("PJM", "eia", ["PJM", "CISO"], CUT)
    first = load_or_fit(tmp_path, key, fits, _Model)
    second = load_or_fit(tmp_path, key, fits, _Model)
    assert fits.count == 1
    assert first == second == _Model(1)


def test_keys_differ_for_every_input_of_a_fit() -> None:
    """Test that region, source, pooled regions and the data cut each change the key."""
    base = cache_key("PJM", "eia", ["PJM", "CISO"], CUT)
    assert base == cache_key("PJM", "eia", ["CISO", "PJM"], CUT)
    others = {
        cache_key("CISO", "eia", ["PJM", "CISO"], CUT),
        cache_key("PJM", "em", ["PJM", "CISO"], CUT),
        cache_key("PJM", "eia", ["PJM"], CUT),
        cache_key("PJM", "eia", ["PJM", "CISO"], CUT + pd.Timedelta(hours=1)),
    }
    assert base not in others
    assert len(others) == 4


def test_key_names_the_code_version() -> None:
    """Test that the key carries the model-code version, so older pickles are never reused."""
    assert f"-v{MODEL_CACHE_VERSION}-" in cache_key("PJM", "eia", ["PJM"], CUT)


def test_an_unreadable_entry_is_refitted_not_trusted(tmp_path: Path) -> None:
    """Test that a corrupt cache file leads to a fresh fit that replaces it."""
    fits = _Fits()
    key = cache_key("PJM", "eia", ["PJM"], CUT)
    (tmp_path / key).write_bytes(b"not a pickle")
    load_or_fit(tmp_path, key, fits, _Model)
    assert fits.count == 1
    load_or_fit(tmp_path, key, fits, _Model)
    assert fits.count == 1


@pytest.mark.parametrize("folder", [None])
def test_no_folder_means_no_cache(folder: Path | None) -> None:
    """Test that without a cache directory every call fits."""
    fits = _Fits()
    load_or_fit(folder, "k", fits, _Model)
    load_or_fit(folder, "k", fits, _Model)
    assert fits.count == 2


def test_the_key_moves_with_the_data_and_the_fitting_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test that a changed value before the cut, or another holiday time zone, changes the
    data digest (a value after the cut does not: the fit never reads it), and that the key
    carries the fitting code's digest."""
    index = pd.date_range("2022-06-01", periods=72, freq="h", tz="UTC")
    base = intensity_history(np.linspace(100.0, 200.0, 72), index[0], region="PJM")
    cut = index[47]
    digest = data_digest([base], cut)
    later = dataclasses.replace(base, intensity=base.intensity.copy())
    later.intensity.iloc[60] += 1.0
    assert data_digest([later], cut) == digest
    earlier = dataclasses.replace(base, intensity=base.intensity.copy())
    earlier.intensity.iloc[10] += 1.0
    assert data_digest([earlier], cut) != digest
    assert data_digest([dataclasses.replace(base, holiday_tz="America/Chicago")], cut) != digest
    key = cache_key("PJM", "eia", ["PJM"], CUT, digest)
    assert key != cache_key("PJM", "eia", ["PJM"], CUT, data_digest([earlier], cut))
    model_cache.code_digest.cache_clear()
    monkeypatch.setattr(model_cache, "_FIT_MODULES", ("models",))
    try:
        assert cache_key("PJM", "eia", ["PJM"], CUT, digest) != key
    finally:
        model_cache.code_digest.cache_clear()
