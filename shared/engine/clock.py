"""Clock model of the simulated GPU: how SM clock changes iteration time and power.

The shape follows how DVFS works on the silicon, and its few constants are fitted to the
measured clock responses in the seeds (``tools/fit_clock.py``; checked by
``greenserve bench engine-clock``; see ``docs/engine.md``):

- compute-bound work (prefill, large-batch GEMMs) slows as ``f_max / f``;
- memory-bound work (decode weight and KV reads) is not clock-free: the SMs issue the loads,
  so achieved bandwidth falls smoothly as the clock drops toward a knee and roughly in
  proportion below it, ``slow(s) = ((1 + (k/s)^q) / (1 + k^q))^(1/q)``, ``s = f/f_max``
  (throttLL'eM §4, A100: −25 % clock costs +5.4 % TBT at batch 32, and "below 840 MHz both
  efficiency and performance get worse");
- dynamic power is ``∝ f·V²``, and the voltage falls with the clock only down to the
  minimum operating voltage: ``V(s)/V_max = v0 + (1 − v0)·max(0, (s − s_v)/(1 − s_v))``.
- a busy GPU draws an active power that does not scale with the SM clock (HBM, L2, NVLink
  and uncore kept active), paid while kernels run and not in the host's gaps between them.

Below ``s_v`` power falls only linearly with the clock while static power, the active power
and the clock-independent HBM share keep being paid for a longer time, which is what makes
energy per unit of work U-shaped in the clock (DynamoLLM Tables I–III: minimum at 1.2–1.6 GHz
on H100; throttLL'eM: sweet spot ≈ 1050 MHz on A100).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_CLOCK_SETTINGS", "ClockSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClockSettings:
    """Parameters of the clock model.

    The defaults are fitted by ``tools/fit_clock.py`` to throttLL'eM's A100 clock response
    (``../shared/seeds/002_throttllem.md`` §4: Llama2-13B TP2, batch 32, 1,024 output tokens;
    sweet spot 1,050 MHz, +37.4 % tokens/J, −6.25 % throughput and +5.41 % TBT at 1,050 vs
    1,410 MHz; power more than 2× from the lowest to the highest clock) and to Ma et al.
    2026 (arXiv 2605.11999: locked SM clocks recover up to 32 % of decode energy on H200),
    with the max-clock power terms of ``coefficients_v1.json`` refitted under the active
    power. DynamoLLM's H100 tables (``001_dynamollm.md`` §3.2–3.4) are held out and
    compared by ``greenserve bench engine-clock``; ``docs/engine.md`` gives both.
    """

    voltage_floor_fraction: float = 0.744
    """``s_v``: clock, as a fraction of the maximum, below which the voltage stays at its
    minimum, so dynamic power falls only in proportion to the clock."""
    min_voltage_ratio: float = 0.521
    """``v0 = V_min / V_max`` along the DVFS curve."""
    memory_knee_fraction: float = 0.535
    """``k``: clock fraction around which memory-bound work turns from nearly clock-free to
    clock-bound (A100: 0.6 × 1410 ≈ 846 MHz, throttLL'eM's 840 MHz)."""
    memory_knee_sharpness: float = 6.637
    """``q`` of the soft knee; large ``q`` approaches ``max(1, k/s)``."""
    memory_power_clock_independent_share: float = 0.506
    """Share of the memory-bound dynamic power drawn by HBM and I/O, which does not scale
    with the SM clock (the memory clock is never changed)."""
    active_power_tdp_fraction: float = 0.125
    """``a``: power drawn while kernels run that does not scale with the SM clock (HBM and
    I/O kept active, L2 and uncore), as a fraction of the board's TDP (A100 50 W, H100
    87.5 W). It is paid for the GPU-active part of each iteration and not in the host's
    gaps, so a slower clock, which stretches the kernels, pays it for longer. The fit's
    targets hold it between 0.075 and 0.175; this is the middle of that range."""

    def __post_init__(self) -> None:
        for name in (
            "voltage_floor_fraction",
            "min_voltage_ratio",
            "memory_knee_fraction",
            "memory_power_clock_independent_share",
            "active_power_tdp_fraction",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.voltage_floor_fraction >= 1.0:
            raise ValueError("voltage_floor_fraction must be below 1")
        if self.memory_knee_sharpness < 1.0:
            raise ValueError("memory_knee_sharpness must be >= 1")

    def dynamic_power_factor(self, s: float) -> float:
        """Return dynamic power at clock fraction ``s`` relative to the maximum clock (f·V²)."""
        floor = self.voltage_floor_fraction
        v0 = self.min_voltage_ratio
        volts = v0 + (1.0 - v0) * max(0.0, (s - floor) / (1.0 - floor))
        return s * volts * volts

    def memory_slowdown(self, s: float) -> float:
        """Return how much longer memory-bound work takes at clock fraction ``s`` (1 at s=1)."""
        k = self.memory_knee_fraction
        q = self.memory_knee_sharpness
        if k <= 0.0:
            return 1.0
        return float(((1.0 + (k / s) ** q) / (1.0 + k**q)) ** (1.0 / q))


DEFAULT_CLOCK_SETTINGS = ClockSettings()
"""The fitted default clock model."""
