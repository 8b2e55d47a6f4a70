"""Unit tests of the fitted-forecaster cache."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from services.forecaster.model_cache import MODEL_CACHE_VERSION, cache_key, load_or_fit


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
