"""Carbon-intensity sources behind one interface, and the CSV loaders.

Every source yields a :class:`CarbonHistory`: an hourly UTC series of grid carbon intensity
in gCO2/kWh, optionally with a fuel-mix frame (shares in [0, 1]), labelled with its signal
("average" or "marginal") and emission-factor type ("direct" or "lifecycle"), as the
carbon-aware-sdk and the Electricity Maps / WattTime APIs label theirs.

The loaders here are the only functions in the forecaster that touch files; the models are
pure. The HTTP clients for the public APIs live in :mod:`services.forecaster.api_clients`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final, Literal, Protocol, runtime_checkable

import numpy as np
import pandas as pd

from shared.paths import data_path
from shared.zones import Zone, ZoneRegistry

__all__ = [
    "EIA_FUELS",
    "EIA_REGIONS",
    "EM_YEARS",
    "EM_ZONES",
    "CarbonHistory",
    "CarbonSource",
    "CsvCarbonSource",
    "EmissionFactor",
    "Signal",
    "load_eia_csv",
    "load_em_csv",
    "load_zone",
    "with_context",
    "with_unknown_context",
    "with_unknown_shares",
]

Signal = Literal["average", "marginal"]
"""Average intensity of the generation mix, or the marginal (MOER) rate."""
EmissionFactor = Literal["direct", "lifecycle"]
"""Direct (stack) emissions only, or life-cycle (LCA) emissions."""

EIA_REGIONS: Final = ("AZPS", "BPAT", "CISO", "MISO", "NYIS", "PJM", "WAAT")
"""Balancing authorities in ``carbon/`` (EIA-930, 2022)."""
EIA_FUELS: Final = ("WND", "SUN", "WAT", "OIL", "NG", "COL", "NUC", "OTH")
"""Fuel columns of the EIA-930 files, generation in MW."""
EM_ZONES: Final = ("US-CAL-CISO", "US-MIDA-PJM", "US-NY-NYIS", "CA-ON", "DE-LU", "GB", "JP-TK")
"""Electricity Maps zones in ``carbon_em/``."""
EM_YEARS: Final = (2021, 2022, 2023, 2024)
"""Years available per zone in ``carbon_em/``."""

_EM_COLUMNS: Final = {
    "direct": "Carbon Intensity gCO₂eq/kWh (direct)",
    "lifecycle": "Carbon Intensity gCO₂eq/kWh (LCA)",
}
_EM_SHARES: Final = {"low_carbon": "Low Carbon Percentage", "renewable": "Renewable Percentage"}


@dataclass(frozen=True, slots=True, kw_only=True)
class CarbonHistory:
    """Hourly carbon-intensity history of one region."""

    region: str
    """Balancing authority or zone name."""
    intensity: pd.Series
    """gCO2/kWh on an hourly, sorted, unique UTC ``DatetimeIndex``; gaps may be NaN."""
    fuel_mix: pd.DataFrame | None
    """Generation shares in [0, 1] on the same index, one column per fuel, or ``None``."""
    signal: Signal
    """What the values mean: average or marginal intensity."""
    emission_factor: EmissionFactor
    """Which emission factors produced the values."""
    source: str
    """Where the data came from (file or API), for provenance in forecasts."""
    generation: pd.DataFrame | None = None
    """Generation in MW per fuel on the same index (EIA-930), or ``None`` where the source
    gives shares only. The source-production member (:mod:`services.forecaster.mix`)
    forecasts these columns."""
    context: pd.DataFrame | None = None
    """Other regions' intensity on the same index, one column per region (cross-region
    booster features, :attr:`ForecasterConfig.context_features`), or ``None``."""
    holiday_tz: str | None = None
    """Local time zone of the region's holiday calendar (its zone's settings,
    :mod:`shared.zones`); ``""``: no holidays; ``None``: the region's default, if any."""

    def until(self, end: pd.Timestamp) -> CarbonHistory:
        """Return the history with every point after ``end`` dropped (inclusive bound)."""
        return self._sliced(slice(None, end))

    def between(self, start: pd.Timestamp, end: pd.Timestamp) -> CarbonHistory:
        """Return the points in ``[start, end]`` (inclusive bounds)."""
        return self._sliced(slice(start, end))

    def _sliced(self, span: slice) -> CarbonHistory:
        def cut(frame: pd.DataFrame | None) -> pd.DataFrame | None:
            return None if frame is None else frame.loc[span]

        return dataclasses.replace(
            self,
            intensity=self.intensity.loc[span],
            fuel_mix=cut(self.fuel_mix),
            generation=cut(self.generation),
            context=cut(self.context),
        )


def with_unknown_shares(history: CarbonHistory, columns: Sequence[str]) -> CarbonHistory:
    """Return ``history`` with fuel-mix ``columns`` that are all unknown (NaN), no generation.

    This lets a history from another source (Electricity Maps, whose shares are not the
    EIA fuels) join a pool of EIA regions as extra training rows of the boosted model: its
    fuel-share features are missing values, which the booster routes like any other
    missing value, and everything else (intensity lags, level ratios, the reference
    models) is computed from its own intensity.
    """
    mix = pd.DataFrame(np.nan, index=history.intensity.index, columns=list(columns))
    return dataclasses.replace(history, fuel_mix=mix, generation=None)


def with_context(history: CarbonHistory, others: Mapping[str, CarbonHistory]) -> CarbonHistory:
    """Return ``history`` with ``others``' intensity as its context, one column per region.

    Every member of a pooled fit needs the same context columns, so a pool passes all its
    regions (its own included) to each member; hours another region lacks are missing.
    """
    index = history.intensity.index
    context = pd.DataFrame(
        {name: other.intensity.reindex(index) for name, other in sorted(others.items())},
        index=index,
    )
    return dataclasses.replace(history, context=context)


def with_unknown_context(history: CarbonHistory, columns: Sequence[str]) -> CarbonHistory:
    """Return ``history`` with context ``columns`` that are all unknown (NaN), for extra
    training rows of another source that join a pool with context (see
    :func:`with_unknown_shares`)."""
    context = pd.DataFrame(np.nan, index=history.intensity.index, columns=list(columns))
    return dataclasses.replace(history, context=context)


@runtime_checkable
class CarbonSource(Protocol):
    """Anything that can supply a region's carbon-intensity history.

    The asyncio shell awaits it; CSV sources run their loader in a thread, API clients do
    HTTP. Both return the same :class:`CarbonHistory`.
    """

    @property
    def region(self) -> str:
        """Region the source serves."""
        ...

    @property
    def signal(self) -> Signal:
        """Signal label of the values this source returns."""
        ...

    @property
    def emission_factor(self) -> EmissionFactor:
        """Emission-factor type of the values this source returns."""
        ...

    async def history(self, start: datetime, end: datetime) -> CarbonHistory:
        """Return hourly history for ``[start, end]`` (UTC)."""
        ...


def _regular_hourly(frame: pd.DataFrame) -> pd.DataFrame:
    """Sort, drop duplicate stamps and put the frame on a gap-free hourly grid (NaN in gaps)."""
    frame = frame[~frame.index.duplicated(keep="last")].sort_index()
    grid = pd.date_range(frame.index[0], frame.index[-1], freq="h", tz="UTC")
    return frame.reindex(grid)


def load_eia_csv(region: str, path: Path | None = None) -> CarbonHistory:
    """Load one EIA-930 balancing authority (``carbon/<BA>.csv``): ``avg_CI``, fuel shares and MW.

    Args:
        region: balancing authority, one of :data:`EIA_REGIONS` (or any file's stem).
        path: file to read; defaults to the reference-data file for ``region``.

    Returns:
        Average intensity with the generation shares of the EIA fuels and their MW
        (negative MW, net consumption, clipped to 0).
    """
    file = path if path is not None else data_path("carbon", f"{region}.csv")
    raw = pd.read_csv(file, index_col=0)
    raw.index = pd.to_datetime(raw.index, utc=True)
    frame = _regular_hourly(raw)
    generation = frame[list(EIA_FUELS)].clip(lower=0.0)
    total = generation.sum(axis=1, min_count=1)
    shares = generation.div(total.where(total > 0), axis=0)
    return CarbonHistory(
        region=region,
        intensity=frame["avg_CI"].astype(float).rename("gco2_per_kwh"),
        fuel_mix=shares,
        signal="average",
        # avg_CI is the generation-weighted mean of fixed per-fuel factors, and those factors
        # are the IPCC AR5 life-cycle medians (fitted exactly, docs/forecaster.md
        # "Source-production tier"): a life-cycle intensity, not a combustion-only one.
        emission_factor="lifecycle",
        source=str(file),
        generation=generation,
    )


def load_em_csv(
    zone: str,
    years: Sequence[int] = EM_YEARS,
    emission_factor: EmissionFactor = "direct",
    folder: Path | None = None,
    files: Sequence[Path] = (),
) -> CarbonHistory:
    """Load one Electricity Maps zone (``carbon_em/<ZONE>_<YEAR>.csv``), years concatenated.

    Args:
        zone: zone id, one of :data:`EM_ZONES`.
        years: years to concatenate, in any order.
        emission_factor: which intensity column to return.
        folder: folder holding the files; defaults to the reference-data ``carbon_em``.
        files: read these files instead (``years`` and ``folder`` are then unused).

    Returns:
        Average intensity, with low-carbon and renewable shares as the fuel-mix frame.
    """
    parts = []
    paths = list(files) or [
        folder / f"{zone}_{year}.csv"
        if folder is not None
        else data_path("carbon_em", f"{zone}_{year}.csv")
        for year in sorted(years)
    ]
    for file in paths:
        parts.append(pd.read_csv(file))
    raw = pd.concat(parts, ignore_index=True)
    raw.index = pd.to_datetime(raw.iloc[:, 0], utc=True)
    frame = _regular_hourly(raw)
    shares = pd.DataFrame(
        {name: frame[column].astype(float) / 100.0 for name, column in _EM_SHARES.items()},
        index=frame.index,
    )
    return CarbonHistory(
        region=zone,
        intensity=frame[_EM_COLUMNS[emission_factor]].astype(float).rename("gco2_per_kwh"),
        fuel_mix=shares,
        signal="average",
        emission_factor=emission_factor,
        source=(
            ",".join(str(f) for f in files)
            if files
            else f"carbon_em/{zone}_{{{','.join(str(y) for y in sorted(years))}}}.csv"
        ),
    )


def load_zone(zone: Zone) -> CarbonHistory:
    """Load a configured zone's files (:class:`shared.zones.Zone`), labelled with its code
    and carrying its holiday calendar's time zone (``""`` for a zone without holidays)."""
    if zone.source == "eia":
        history = load_eia_csv(zone.code, zone.files[0])
    else:
        history = load_em_csv(zone.code, files=zone.files)
    return dataclasses.replace(history, holiday_tz=zone.holiday_tz)


@dataclass(frozen=True, slots=True)
class CsvCarbonSource:
    """A :class:`CarbonSource` over the reference CSV files (replayed history).

    Attributes:
        region: EIA balancing authority or Electricity Maps zone.
        kind: ``"eia"`` for ``carbon/`` or ``"em"`` for ``carbon_em/``.
        emission_factor: for ``"em"``, which column to read (default direct); the EIA
            files carry one intensity, life-cycle, so for ``"eia"`` only that (or None).
    """

    region: str
    kind: Literal["eia", "em"] = "eia"
    emission_factor: EmissionFactor | None = None
    signal: Signal = "average"

    def __post_init__(self) -> None:
        if self.kind == "eia" and self.emission_factor not in (None, "lifecycle"):
            raise ValueError("the EIA-930 files carry a life-cycle intensity only")

    def load(self) -> CarbonHistory:
        """Read the whole file(s) synchronously, as the zone ``kind:region`` of the data
        directory (:mod:`shared.zones`: its holiday calendar's time zone comes along)."""
        zone = ZoneRegistry.from_settings().resolve(f"{self.kind}:{self.region}")
        if self.kind == "eia":
            return load_zone(zone)
        history = load_em_csv(
            self.region, emission_factor=self.emission_factor or "direct", files=zone.files
        )
        return dataclasses.replace(history, holiday_tz=zone.holiday_tz)

    async def history(self, start: datetime, end: datetime) -> CarbonHistory:
        """Return ``[start, end]`` of the file's history, reading it off the event loop."""
        full = await asyncio.to_thread(self.load)
        lo, hi = pd.Timestamp(start), pd.Timestamp(end)
        lo = lo.tz_localize("UTC") if lo.tzinfo is None else lo
        hi = hi.tz_localize("UTC") if hi.tzinfo is None else hi
        return full.between(lo, hi)
