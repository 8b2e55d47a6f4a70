"""Fit the engine's clock model (``shared/engine/clock.py``) to the measured clock responses.

Run ``.venv/bin/python tools/fit_clock.py``; it prints the fitted ``ClockSettings``, the
residuals, and the max-clock power terms to refit with ``tools/fit_engine.py`` (which reads
the settings from ``shared/engine/clock.py``). Deterministic: a fixed grid over the active
power and Nelder–Mead from four fixed starts per grid point, the lowest loss kept.

Targets:

- throttLL'eM (``../shared/seeds/002_throttllem.md`` §4, Fig. 2: Llama2-13B TP2 on A100,
  batch 32, 1 input and 1,024 output tokens): the tokens-per-joule sweet spot at 1,050 MHz;
  at 1,050 vs 1,410 MHz +37.4 % tokens/J and +5.41 % TBT, so power at 1,050 MHz is
  0.9375 / 1.374 = 0.682 of its maximum-clock value (−6.25 % throughput for +37.4 % tokens/J);
  power "more than twofold" from the lowest to the highest clock (a bound, penalised only
  when violated).
- Ma et al. 2026 (arXiv 2605.11999, abstract; H200, the H100's die with faster HBM): locking
  the SM clock recovers "up to 32 %" of decode energy. The engine's H100 counterpart is the
  largest decode-energy saving of its best clock over the maximum clock, over batches 1–256
  of a GQA 8B model (Llama-3.1-8B, TP1, context 1,000).

The active power ``a`` (clock-independent power while kernels run) adds to the power at
the maximum clock, so for every candidate ``a`` (a grid of 0–30 % of TDP) the max-clock
power terms (``busy_w``, ``compute_w``, ``memory_w``) are refitted by
``tools/fit_engine.py``'s own fit on its training split before the clock terms are fitted;
the held-out errors of
``greenserve bench engine-accuracy`` are printed for the chosen ``a``. DynamoLLM's H100
tables are not used here: ``greenserve bench engine-clock`` holds them out.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from scipy.optimize import minimize

from greenserve.bench.engine_clock.paper import THROTTLLEM
from greenserve.bench.engine_clock.sweeps import saturated_tokens_per_joule, throttllem_sweep
from shared.engine.accuracy import evaluate
from shared.engine.calibration import CalibrationPoint, load_points
from shared.engine.clock import ClockSettings
from shared.engine.coefficients import Coefficients
from shared.paths import data_path

STARTS = (
    (0.55, 0.7, 0.6, 4.0, 0.4),
    (0.7, 0.6, 0.5, 2.0, 0.6),
    (0.75, 0.75, 0.7, 6.0, 0.3),
    (0.6, 0.5, 0.55, 8.0, 0.5),
)
ACTIVE_GRID = tuple(round(0.025 * i, 3) for i in range(13))
"""Candidate active powers, as a fraction of TDP (0–30 %: 0–210 W on an H100)."""
TARGETS = {
    "sweet_mhz": 1050.0,
    "tpj_gain": 0.374,
    "tbt_gain": 0.0541,
    "power_ratio": 0.682,
    "h100_decode_saving": 0.32,
}
WEIGHTS = {
    "sweet_mhz": 4.0,  # throttLL'eM's headline
    "tpj_gain": 1.0,
    "tbt_gain": 0.5,
    "power_ratio": 1.0,
    "h100_decode_saving": 1.0,
}
MIN_POWER_SPAN = 2.0
"""throttLL'eM: power rises "more than twofold" from the lowest to the highest clock."""
H100_DECODE_BATCHES = (1, 8, 32, 64, 128, 256)
PLATEAU_TOLERANCE = 1e-5
"""Losses within this of the lowest fit the targets equally well (the residual left is
throttLL'eM's power ratio, the same at every such active power)."""


def _load_fit_engine() -> Callable[..., Coefficients]:
    path = Path(__file__).with_name("fit_engine.py")
    spec = importlib.util.spec_from_file_location("fit_engine", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fit: Callable[..., Coefficients] = module.fit
    return fit


def settings(x: tuple[float, ...] | list[float], active: float) -> ClockSettings:
    """Clamp a parameter vector into the valid ranges and build settings."""
    return ClockSettings(
        voltage_floor_fraction=min(max(x[0], 0.05), 0.95),
        min_voltage_ratio=min(max(x[1], 0.3), 1.0),
        memory_knee_fraction=min(max(x[2], 0.05), 1.0),
        memory_knee_sharpness=max(x[3], 1.0),
        memory_power_clock_independent_share=min(max(x[4], 0.0), 1.0),
        active_power_tdp_fraction=active,
    )


def h100_decode_saving(clock: ClockSettings, coefficients: Coefficients | None) -> float:
    """Largest decode-energy saving of the best clock over the maximum clock (H100, 8B)."""
    best = 0.0
    for batch in H100_DECODE_BATCHES:
        sweep = saturated_tokens_per_joule(
            gpu="H100-80GB", model="llama-3.1-8b", tp=1, batch=batch, context_tokens=1000.0,
            clock=clock, coefficients=coefficients,
        )  # fmt: skip
        top = sweep[max(sweep)][0]
        best = max(best, 1.0 - top / max(v[0] for v in sweep.values()))
    return best


def response(clock: ClockSettings, coefficients: Coefficients | None = None) -> dict[str, float]:
    """Return the engine's values of the targets under ``clock``."""
    sweep = throttllem_sweep(clock, coefficients)
    top, at = sweep[THROTTLLEM.max_clock_mhz], sweep[1050.0]
    return {
        "sweet_mhz": max(sweep, key=lambda mhz: sweep[mhz][0]),
        "tpj_gain": at[0] / top[0] - 1.0,
        "tbt_gain": at[1] / top[1] - 1.0,
        "power_ratio": at[2] / top[2],
        "h100_decode_saving": h100_decode_saving(clock, coefficients),
        "power_span": top[2] / sweep[min(sweep)][2],
    }


def loss(clock: ClockSettings, coefficients: Coefficients) -> float:
    """Weighted squared relative errors, plus a penalty below throttLL'eM's 2× power span."""
    got = response(clock, coefficients)
    total = sum(w * ((got[k] - TARGETS[k]) / TARGETS[k]) ** 2 for k, w in WEIGHTS.items())
    shortfall = max(0.0, MIN_POWER_SPAN - got["power_span"]) / MIN_POWER_SPAN
    return total + 10.0 * shortfall**2


def fit_at(active: float, coefficients: Coefficients) -> tuple[float, ClockSettings]:
    """Fit the five shape terms for one active power; return the loss and the settings."""
    best: tuple[float, ClockSettings] | None = None
    for start in STARTS:
        result = minimize(lambda x: loss(settings(x, active), coefficients), list(start),
                          method="Nelder-Mead",
                          options={"maxiter": 300, "xatol": 1e-3, "fatol": 1e-6})  # fmt: skip
        candidate = (float(result.fun), settings(list(result.x), active))
        if best is None or candidate[0] < best[0]:
            best = candidate
    assert best is not None
    return best


def main() -> None:
    """Fit over the active-power grid, print the chosen settings, residuals and accuracy."""
    fit_engine = _load_fit_engine()
    points: list[CalibrationPoint] = load_points(data_path("calibration"))
    fits: dict[float, tuple[float, ClockSettings, Coefficients]] = {}
    for active in ACTIVE_GRID:
        coefficients = fit_engine(points, ClockSettings(active_power_tdp_fraction=active))
        value, clock = fit_at(active, coefficients)
        fits[active] = (value, clock, coefficients)
        shape = {k: round(float(v), 3) for k, v in asdict(clock).items()}
        print(f"active {active:.3f}: loss {value:.6f} {shape}", flush=True)
    # The targets bound the active power from both sides (Ma et al.'s 32 % from below,
    # throttLL'eM's 2x power span from above) but are met equally well in between: take the
    # middle of that plateau rather than an end picked by round-off.
    lowest = min(value for value, _, _ in fits.values())
    plateau = [a for a, (value, _, _) in fits.items() if value <= lowest + PLATEAU_TOLERANCE]
    chosen = min(plateau, key=lambda a: abs(a - (min(plateau) + max(plateau)) / 2.0))
    print(f"plateau: active {min(plateau):.3f}-{max(plateau):.3f} of TDP; chosen {chosen:.3f}")
    _, fitted, coefficients = fits[chosen]
    print({k: round(float(v), 3) for k, v in asdict(fitted).items()})
    got = response(fitted, coefficients)
    for key, target in TARGETS.items():
        print(f"{key}: engine {got[key]:.4f}, paper {target:.4f}")
    print(f"power_span: engine {got['power_span']:.3f}, paper > {MIN_POWER_SPAN}")
    accuracy: dict[str, Any] = evaluate(points, coefficients, clock=fitted)
    for key in ("tbt", "ttft", "power", "j_per_token"):
        print(f"held-out {key} median error: {accuracy[key]['median_ape']:.2f} %")
    for gpu, c in coefficients.gpus.items():
        watts = replace(c, allreduce_latency_s={}, allreduce_bytes_per_s={})
        print(gpu, {k: round(v, 2) for k, v in asdict(watts).items() if k.endswith("_w")})


if __name__ == "__main__":
    main()
