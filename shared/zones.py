"""Grid zones by configuration: a zone is a data file plus a few settings.

A zone is named ``<source>:<code>``: ``eia:ERCO`` is an EIA-930 balancing authority whose
hourly file is ``carbon/ERCO.csv`` in the data directory, ``em:KR`` an Electricity Maps
zone whose yearly files are ``carbon_em/KR_<year>.csv``. Its settings are the local time
zone and the holiday calendar the forecaster's booster reads (NERC's six holidays for US
zones, none elsewhere); the defaults below cover the common US regions, and the operator
names the rest (``forecaster.zones`` in the settings file), so a new zone needs no code
change. A bare code is resolved only when exactly one source has a file for it; otherwise
the error says which prefixed names exist.

Kept free of pandas and the forecaster: the CLI checks ``--regions`` with it at parse
time, and services read it through :class:`ZoneRegistry`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict

from shared.paths import data_dir

__all__ = [
    "DEFAULT_TIMEZONES",
    "LIVE_KEY_ENV",
    "SOURCES",
    "HolidayCalendar",
    "LiveProvider",
    "Source",
    "Zone",
    "ZoneError",
    "ZoneRegistry",
    "ZoneSettings",
    "split_zone_name",
]

Source = Literal["eia", "em"]
"""``eia``: an EIA-930 balancing-authority file; ``em``: Electricity Maps yearly files."""
SOURCES: Final[tuple[Source, ...]] = get_args(Source)
LiveProvider = Literal["electricitymaps", "watttime", "eia"]
"""Where live mode reads a zone's intensity (services/forecaster/live.py)."""
LIVE_KEY_ENV: Final[dict[LiveProvider, tuple[str, ...]]] = {
    "electricitymaps": ("ELECTRICITYMAPS_API_KEY",),
    "watttime": ("WATTTIME_USERNAME", "WATTTIME_PASSWORD"),
    "eia": ("EIA_API_KEY",),
}
"""Environment variables holding each live provider's credentials (read by the forecaster
in live mode, and checked by ``greenserve up --carbon-mode live`` before it starts)."""
HolidayCalendar = Literal["nerc", "none"]
"""``nerc``: NERC's six off-peak holidays on the zone's local date; ``none``: no holidays."""

_SOURCE_NAMES: Final = {"eia": "EIA-930", "em": "Electricity Maps"}
_CODE: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")

DEFAULT_TIMEZONES: Final[dict[str, str]] = {
    # EIA-930 balancing authorities (each BA's reporting time zone in EIA's BA table)
    "AZPS": "America/Phoenix",
    "BPAT": "America/Los_Angeles",
    "CISO": "America/Los_Angeles",
    "ERCO": "America/Chicago",
    "ISNE": "America/New_York",
    "MISO": "America/Chicago",
    "NYIS": "America/New_York",
    "PJM": "America/New_York",
    "SWPP": "America/Chicago",
    # Pacific Northwest hydro: its intensity equals BPAT's in 92 % of the 2022 hours.
    "WAAT": "America/Los_Angeles",
    # Electricity Maps zones in the US
    "US-CAL-CISO": "America/Los_Angeles",
    "US-MIDA-PJM": "America/New_York",
    "US-NY-NYIS": "America/New_York",
    "US-TEX-ERCO": "America/Chicago",
}
"""Local time zone of the US regions known without settings (a holiday is a local date).
A zone not listed here names its own (:attr:`ZoneSettings.timezone`)."""


class ZoneError(ValueError):
    """A zone that cannot be used: unknown, ambiguous, or missing a file or a setting."""


class ZoneSettings(BaseModel):
    """What the operator says about one zone (``forecaster.zones.<source>:<code>``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    files: tuple[Path, ...] = ()
    """Data files to read instead of the data directory's (``eia``: one CSV; ``em``: the
    yearly CSVs)."""
    timezone: str | None = None
    """IANA time zone of the zone's local dates (holidays); default: :data:`DEFAULT_TIMEZONES`."""
    holidays: HolidayCalendar | None = None
    """Holiday calendar; default ``nerc`` for US zones (every EIA one, Electricity Maps
    ``US-*``), ``none`` elsewhere."""
    live_provider: LiveProvider | None = None
    """Where live mode reads the zone's current and forecast intensity; default: the
    source's own provider (``eia`` → EIA API, ``em`` → Electricity Maps)."""
    live_code: str | None = None
    """The provider's name for the zone (a WattTime region such as ``ERCOT_EASTTX``);
    default: the zone's code."""


@dataclass(frozen=True, slots=True)
class Zone:
    """One grid zone, resolved: where its data is and how its calendar reads."""

    source: Source
    code: str
    """The region's token in subjects, keys and pools (``ERCO``, ``KR``)."""
    files: tuple[Path, ...]
    timezone: str | None
    holidays: HolidayCalendar
    live_provider: LiveProvider
    live_code: str

    @property
    def name(self) -> str:
        """``<source>:<code>``, the name settings and the CLI use."""
        return f"{self.source}:{self.code}"

    @property
    def holiday_tz(self) -> str:
        """Time zone of the holiday calendar, ``""`` when the zone has no holidays."""
        return (self.timezone or "") if self.holidays == "nerc" else ""


def split_zone_name(name: str) -> tuple[Source | None, str]:
    """``"eia:ERCO"`` → ``("eia", "ERCO")``; a bare ``"ERCO"`` → ``(None, "ERCO")``.

    Raises:
        ZoneError: an unknown prefix or a code that cannot be a subject token.
    """
    text = name.strip()
    prefix, sep, code = text.partition(":")
    source: Source | None = None
    if sep:
        if prefix not in SOURCES:
            raise ZoneError(
                f"zone {text!r}: unknown source {prefix!r}; write eia:<BA> (EIA-930 file "
                "carbon/<BA>.csv) or em:<ZONE> (Electricity Maps files carbon_em/<ZONE>_<year>.csv)"
            )
        source = prefix
    else:
        code = text
    if not _CODE.fullmatch(code):
        raise ZoneError(f"zone {text!r}: the code must be 1-64 of [A-Za-z0-9_-]")
    return source, code


def _is_us(source: Source, code: str) -> bool:
    # EIA-930 covers US balancing authorities only; Electricity Maps names US zones US-*.
    return source == "eia" or code.startswith("US-")


@dataclass(frozen=True, slots=True)
class ZoneRegistry:
    """Zones found in a data directory, with the operator's settings on top."""

    folder: Path
    settings: Mapping[str, ZoneSettings]

    @classmethod
    def from_settings(
        cls, settings: Mapping[str, ZoneSettings] | None = None, folder: Path | None = None
    ) -> ZoneRegistry:
        """The registry over ``folder`` (default: the data directory setting)."""
        overrides = dict(settings or {})
        for key in overrides:
            source, _ = split_zone_name(key)
            if source is None:
                raise ZoneError(
                    f"zone settings key {key!r} needs its source: write eia:{key} or em:{key}"
                )
        return cls(folder if folder is not None else data_dir(), overrides)

    def _files(self, source: Source, code: str) -> tuple[Path, ...]:
        if source == "eia":
            file = self.folder / "carbon" / f"{code}.csv"
            return (file,) if file.is_file() else ()
        return tuple(sorted((self.folder / "carbon_em").glob(f"{code}_[0-9][0-9][0-9][0-9].csv")))

    def _where(self, source: Source, code: str) -> str:
        if source == "eia":
            return str(self.folder / "carbon" / f"{code}.csv")
        return str(self.folder / "carbon_em" / f"{code}_<year>.csv")

    def available(self) -> list[str]:
        """Every zone with files in the data directory or settings, as ``source:code``."""
        names = set(self.settings)
        for file in sorted((self.folder / "carbon").glob("*.csv")):
            names.add(f"eia:{file.stem}")
        for file in sorted((self.folder / "carbon_em").glob("*_[0-9][0-9][0-9][0-9].csv")):
            names.add(f"em:{file.stem.rsplit('_', 1)[0]}")
        return sorted(names)

    def resolve(self, name: str) -> Zone:
        """The zone ``name`` (``source:code``, or a bare code that one source has files for).

        Raises:
            ZoneError: naming what is missing: the file(s) looked for, the setting that
                would supply them, or the time zone a holiday calendar needs.
        """
        source, code = split_zone_name(name)
        if source is None:
            found = [s for s in SOURCES if f"{s}:{code}" in self.settings or self._files(s, code)]
            if len(found) != 1:
                where = " and ".join(self._where(s, code) for s in SOURCES)
                if not found:
                    raise ZoneError(
                        f"zone {code!r}: no data file ({where} both missing); add the file to "
                        f"the data directory or name it in forecaster.zones.'eia:{code}'.files"
                    )
                raise ZoneError(
                    f"zone {code!r} is ambiguous: both {where} exist; write eia:{code} or em:{code}"
                )
            source = found[0]
        key = f"{source}:{code}"
        extra = self.settings.get(key, ZoneSettings())
        files = extra.files or self._files(source, code)
        missing = [f for f in files if not Path(f).is_file()]
        if not files or missing:
            what = ", ".join(str(f) for f in missing) if missing else self._where(source, code)
            raise ZoneError(
                f"zone {key}: {_SOURCE_NAMES[source]} data file {what} not found; add it to the "
                f"data directory ({self.folder}) or name it in forecaster.zones.'{key}'.files"
            )
        us = _is_us(source, code)
        holidays: HolidayCalendar = extra.holidays or ("nerc" if us else "none")
        timezone = extra.timezone or DEFAULT_TIMEZONES.get(code)
        if holidays == "nerc" and timezone is None:
            raise ZoneError(
                f"zone {key}: its holiday calendar (nerc) needs the zone's local time zone; "
                f"set forecaster.zones.'{key}'.timezone (an IANA name such as America/Chicago) "
                "or holidays: none"
            )
        if timezone is not None:
            try:
                ZoneInfo(timezone)
            except (ZoneInfoNotFoundError, ValueError):
                raise ZoneError(f"zone {key}: time zone {timezone!r} is not an IANA name") from None
        default_provider: Literal["electricitymaps", "eia"] = (
            "eia" if source == "eia" else "electricitymaps"
        )
        return Zone(
            source=source,
            code=code,
            files=tuple(Path(f) for f in files),
            timezone=timezone,
            holidays=holidays,
            live_provider=extra.live_provider or default_provider,
            live_code=extra.live_code or code,
        )

    def resolve_all(self, names: list[str] | tuple[str, ...]) -> list[Zone]:
        """Every zone of ``names``; two names for one code (``eia:X``, ``em:X``) are refused,
        since the code is the region's subject token.

        Raises:
            ZoneError: the first problem found, or every code named twice.
        """
        zones = [self.resolve(name) for name in names]
        seen: dict[str, str] = {}
        for zone in zones:
            other = seen.setdefault(zone.code, zone.name)
            if other != zone.name:
                raise ZoneError(
                    f"zones {other} and {zone.name} share the code {zone.code}, which names "
                    "the region in subjects and pools; keep one"
                )
        return list({zone.name: zone for zone in zones}.values())
