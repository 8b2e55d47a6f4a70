"""Small synthetic grid-zone files in the reference data's formats, for a tmp data dir.

The column layouts are those of the files in ``../shared/data`` (its README): EIA-930
``carbon/<BA>.csv`` (``timestamp``, MW per fuel, ``avg_CI``) and Electricity Maps
``carbon_em/<ZONE>_<YEAR>.csv`` (the data portal's export columns). Values are a daily
cycle, enough for the forecaster's reference models and a small fit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from services.forecaster.api_clients import EIA_FUEL_FACTORS

__all__ = ["write_eia_csv", "write_em_csv"]

EM_COLUMNS = (
    "Datetime (UTC)",
    "Country",
    "Zone Name",
    "Zone Id",
    "Carbon Intensity gCO₂eq/kWh (direct)",
    "Carbon Intensity gCO₂eq/kWh (LCA)",
    "Low Carbon Percentage",
    "Renewable Percentage",
    "Data Source",
    "Data Estimated",
    "Data Estimation Method",
)


def _cycle(index: pd.DatetimeIndex, level: float) -> np.ndarray:
    hours = np.arange(len(index))
    solar = np.clip(np.sin(2 * np.pi * ((index.hour.to_numpy() - 6) / 24)), 0, None)
    return level * (1 - 0.3 * solar) * (1 + 0.05 * np.sin(2 * np.pi * hours / (24 * 9)))


def write_eia_csv(data_dir: Path, code: str, start: str, hours: int) -> Path:
    """``carbon/<code>.csv`` with ``hours`` hourly rows from ``start`` (UTC)."""
    index = pd.date_range(start, periods=hours, freq="h", tz="UTC")
    solar = np.clip(np.sin(2 * np.pi * ((index.hour.to_numpy() - 6) / 24)), 0, None)
    frame = pd.DataFrame(
        {
            "WND": 3000.0,
            "SUN": 4000.0 * solar,
            "WAT": 500.0,
            "OIL": 0.0,
            "NG": 20000.0 - 3000.0 * solar,
            "COL": 5000.0,
            "NUC": 4000.0,
            "OTH": 200.0,
        },
        index=index,
    )
    total = frame.sum(axis=1)
    frame["avg_CI"] = sum(frame[f] * EIA_FUEL_FACTORS[f] for f in EIA_FUEL_FACTORS) / total
    frame.index = pd.Index(index.strftime("%Y-%m-%d %H:%M:%S+00:00"))
    folder = data_dir / "carbon"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{code}.csv"
    frame.to_csv(path, index_label="timestamp")
    return path


def write_em_csv(data_dir: Path, zone: str, year: int, hours: int, level: float = 400.0) -> Path:
    """``carbon_em/<zone>_<year>.csv`` with ``hours`` hourly rows from January 1."""
    index = pd.date_range(f"{year}-01-01", periods=hours, freq="h", tz="UTC")
    direct = _cycle(index, level)
    frame = pd.DataFrame(
        {
            EM_COLUMNS[0]: index.strftime("%Y-%m-%d %H:%M:%S"),
            EM_COLUMNS[1]: "Synthetic",
            EM_COLUMNS[2]: "Synthetic",
            EM_COLUMNS[3]: zone,
            EM_COLUMNS[4]: direct.round(2),
            EM_COLUMNS[5]: (direct * 1.1).round(2),
            EM_COLUMNS[6]: 40.0,
            EM_COLUMNS[7]: 20.0,
            EM_COLUMNS[8]: "synthetic",
            EM_COLUMNS[9]: "false",
            EM_COLUMNS[10]: "",
        }
    )
    folder = data_dir / "carbon_em"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{zone}_{year}.csv"
    frame.to_csv(path, index=False)
    return path
