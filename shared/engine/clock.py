"""Clock model of the simulated GPU: how SM clock changes iteration time and power.

No public measurement of LLM-serving power against SM clock exists (see the data README),
so the shape is an explicit assumption, exposed as :class:`ClockSettings` and documented
in ``docs/engine.md``. It is built to reproduce the qualitative facts the seeds report:

- compute-bound work (prefill, large-batch GEMMs) slows as ``f_max / f``;
- memory-bound work (decode weight and KV reads) keeps full HBM bandwidth down to a knee
  clock, below which the SMs can no longer issue loads fast enough and it slows as
  ``knee / f`` (throttLL'eM §4: "below 840 MHz both efficiency and performance get worse";
  IPS rises ~3× from 210 MHz to 1410 MHz);
- dynamic power grows super-linearly with clock, ``P = P_idle + u · k · (f / f_max)^γ``
  (FREESH Fig. 14 calls the curve convex; throttLL'eM §4: power more than doubles from
  minimum to maximum clock and is nearly independent of batch size).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_CLOCK_SETTINGS", "ClockSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClockSettings:
    """Parameters of the clock model (assumed, not fitted; see ``docs/engine.md``)."""

    power_exponent: float = 2.5
    """γ in ``P_dyn ∝ (f/f_max)^γ``: dynamic power ∝ f·V² with voltage rising with f
    along the DVFS curve gives γ between 2 and 3; 2.5 is the middle."""
    memory_knee_fraction: float = 0.6
    """Clock, as a fraction of the maximum, below which memory-bound work slows in
    proportion to the clock (A100: 0.6 × 1410 ≈ 846 MHz, throttLL'eM's 840 MHz)."""
    memory_power_clock_independent_share: float = 0.4
    """Share of the memory-bound dynamic power drawn by HBM and I/O, which does not scale
    with the SM clock (the memory clock is never changed)."""

    def __post_init__(self) -> None:
        if self.power_exponent < 1.0:
            raise ValueError("power_exponent must be >= 1 (dynamic power is super-linear)")
        for name in (
            "memory_knee_fraction",
            "memory_power_clock_independent_share",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")


DEFAULT_CLOCK_SETTINGS = ClockSettings()
"""The documented default clock model."""
