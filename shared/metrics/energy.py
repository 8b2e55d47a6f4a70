"""Energy and emissions accounting: Wh, kg CO2, tokens per joule.

Energy is integrated from sampled power (trapezoid rule, as FREESH does from nvidia-smi);
emissions are energy times the carbon intensity of the grid at that place and time.
Intensity units differ by source: gCO2/kWh (EIA, Electricity Maps) or lb CO2/MWh (PJM
marginal emissions in FREESH), so both conversions are here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "JOULES_PER_KWH",
    "JOULES_PER_WH",
    "KG_PER_LB",
    "CarbonMeter",
    "co2_kg",
    "energy_j_from_power",
    "lb_per_mwh_to_g_per_kwh",
    "tokens_per_joule",
]

FloatArray = NDArray[np.float64]

JOULES_PER_WH: Final = 3600.0
"""Joules in one watt-hour."""

JOULES_PER_KWH: Final = JOULES_PER_WH * 1000.0
"""Joules in one kilowatt-hour, the unit grid intensities (gCO2/kWh) are given per."""

KG_PER_LB: Final = 0.45359237
"""Kilograms in one pound."""


def energy_j_from_power(times_s: FloatArray, power_w: FloatArray) -> float:
    """Return energy in joules from power samples, integrated with the trapezoid rule.

    Args:
        times_s: sample times, ascending.
        power_w: power at each sample (summed over GPUs if several).
    """
    if times_s.size < 2:
        return 0.0
    return float(np.sum(np.diff(times_s) * (power_w[1:] + power_w[:-1]) / 2.0))


def co2_kg(energy_j: FloatArray, intensity_g_per_kwh: FloatArray) -> float:
    """Return kg CO2 for energy slices, each multiplied by its grid intensity.

    Args:
        energy_j: energy used in each slice (for example per region and hour).
        intensity_g_per_kwh: carbon intensity in force for each slice, gCO2/kWh. Marginal
            rates may be negative (FREESH); the sum then shrinks accordingly.
    """
    kwh = energy_j / JOULES_PER_KWH
    return float(np.sum(kwh * intensity_g_per_kwh) / 1000.0)


def lb_per_mwh_to_g_per_kwh(rate_lb_per_mwh: FloatArray) -> FloatArray:
    """Convert PJM-style lb CO2/MWh to gCO2/kWh (FREESH objective units)."""
    return rate_lb_per_mwh * KG_PER_LB  # lb/MWh · 453.6 g/lb / 1000 kWh/MWh


def tokens_per_joule(tokens: int | float, energy_j: float) -> float:
    """Return output tokens per joule (NaN when no energy was measured)."""
    return float(tokens) / energy_j if energy_j > 0 else float("nan")


@dataclass(slots=True)
class CarbonMeter:
    """Running gCO2 of one cumulative energy counter (a worker's, like NVML's).

    Each increment of the counter is multiplied by the intensity in force when it is read,
    so with reads every few seconds an hour's energy meets that hour's intensity. An
    increment read while the intensity is unknown is not counted (``unknown_j`` keeps it); a
    counter that goes down (a restarted backend) starts a new baseline.
    """

    grams: float = 0.0
    unknown_j: float = 0.0
    last_j: float | None = None

    def add(self, energy_j: float, intensity_g_per_kwh: float | None) -> float:
        """Read the counter (J) with the intensity now (gCO2/kWh); return the total grams."""
        if self.last_j is not None and energy_j >= self.last_j:
            step_j = energy_j - self.last_j
            if intensity_g_per_kwh is None:
                self.unknown_j += step_j
            else:
                self.grams += step_j / JOULES_PER_KWH * intensity_g_per_kwh
        self.last_j = energy_j
        return self.grams
