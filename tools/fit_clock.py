"""Fit the engine's clock model (``shared/engine/clock.py``) to throttLL'eM's A100 points.

Run ``.venv/bin/python tools/fit_clock.py``; it prints the fitted ``ClockSettings`` and the
residuals. Targets (``../shared/seeds/002_throttllem.md`` §4, Llama2-13B TP2 on A100, batch 32,
1 input and 1,024 output tokens): the tokens-per-joule sweet spot at 1,050 MHz; at 1,050 vs
1,410 MHz +37.4 % tokens/J and +5.41 % TBT, so power at 1,050 MHz is 0.9375 / 1.374 = 0.682
of its maximum-clock value (−6.25 % throughput for +37.4 % tokens/J). The power and latency
terms at the maximum clock (``coefficients_v1.json``) stay as fitted by ``tools/fit_engine.py``.
DynamoLLM's H100 tables are not used here: ``greenserve bench engine-clock`` holds them out.

Five parameters meet four targets, so the fit starts from four fixed points and keeps the one
with the lowest loss (deterministic).
"""

from __future__ import annotations

from dataclasses import asdict

from scipy.optimize import minimize

from greenserve.bench.engine_clock_paper import THROTTLLEM
from greenserve.bench.engine_clock_run import throttllem_sweep
from shared.engine.clock import ClockSettings

STARTS = (
    (0.55, 0.7, 0.6, 4.0, 0.4),
    (0.7, 0.6, 0.5, 2.0, 0.6),
    (0.75, 0.75, 0.7, 6.0, 0.3),
    (0.6, 0.5, 0.55, 8.0, 0.5),
)
TARGETS = {"sweet_mhz": 1050.0, "tpj_gain": 0.374, "tbt_gain": 0.0541, "power_ratio": 0.682}


def settings(x: tuple[float, ...] | list[float]) -> ClockSettings:
    """Clamp a parameter vector into the valid ranges and build settings."""
    return ClockSettings(
        voltage_floor_fraction=min(max(x[0], 0.05), 0.95),
        min_voltage_ratio=min(max(x[1], 0.3), 1.0),
        memory_knee_fraction=min(max(x[2], 0.05), 1.0),
        memory_knee_sharpness=max(x[3], 1.0),
        memory_power_clock_independent_share=min(max(x[4], 0.0), 1.0),
    )


def response(clock: ClockSettings) -> dict[str, float]:
    """Return the engine's values of the four targets under ``clock``."""
    sweep = throttllem_sweep(clock)
    top, at = sweep[THROTTLLEM.max_clock_mhz], sweep[1050.0]
    return {
        "sweet_mhz": max(sweep, key=lambda mhz: sweep[mhz][0]),
        "tpj_gain": at[0] / top[0] - 1.0,
        "tbt_gain": at[1] / top[1] - 1.0,
        "power_ratio": at[2] / top[2],
    }


def loss(x: list[float]) -> float:
    """Squared relative errors; the sweet spot weighs 4× (it is the paper's headline)."""
    got = response(settings(x))
    weights = {"sweet_mhz": 4.0, "tpj_gain": 1.0, "tbt_gain": 0.5, "power_ratio": 1.0}
    return sum(w * ((got[k] - TARGETS[k]) / TARGETS[k]) ** 2 for k, w in weights.items())


def main() -> None:
    """Fit from every start, print the best settings and residuals."""
    best = None
    for start in STARTS:
        result = minimize(loss, list(start), method="Nelder-Mead",
                          options={"maxiter": 400, "xatol": 1e-3, "fatol": 1e-6})  # fmt: skip
        if best is None or result.fun < best.fun:
            best = result
    assert best is not None
    fitted = settings(list(best.x))
    print({k: round(float(v), 3) for k, v in asdict(fitted).items()})
    got = response(fitted)
    for key, target in TARGETS.items():
        print(f"{key}: engine {got[key]:.4f}, paper {target:.4f}")


if __name__ == "__main__":
    main()
