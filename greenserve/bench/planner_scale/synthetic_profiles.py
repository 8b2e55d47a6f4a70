"""A documented generator of DynamoLLM-scale profile rows and problems (stand-in for profiling).

DynamoLLM (seed 001 §3.1) profiles every (request class, TP ∈ {2,4,8}, clock 800…1980 MHz) on a
DGX H100; no such table is public. Until ``greenserve profile`` writes calibrated rows (same
FREESH CSV format plus ``clock_mhz``), this module generates them from an explicit model. Its
purpose is the *size and shape* of the planning problem (solve-time benchmark, tests), not
absolute energy. All constants are assumptions, stated here:

- Nine classes (Table IV), represented by (input, output) tokens: S = (128, 50),
  M = (600, 200), L = (2500, 600).
- Relative clock φ = f / 1980 MHz. Decode speed scales as 0.35 + 0.65·φ (decode is largely
  memory-bound); prefill speed scales as φ (compute-bound).
- At 1980 MHz, per instance: decode 1200/2600/4400 tokens/s and prefill 6000/12000/20000
  tokens/s for TP2/4/8; loaded TBT 60/40/30 ms.
- Sustained QPS = 70 % of min(decode tokens/s ÷ output, prefill tokens/s ÷ input).
- TTFT = 3 × prefill time (queueing at sustained load) + one TBT; E2E = TTFT + output × TBT.
- GPU power = 69 W idle (DynamoLLM Fig. 3: 550 W per 8 idle GPUs) + 531 W × φ^2.5 × 0.85
  utilisation; instance power = TP × GPU power. Energy per request is U-shaped in clock, so the
  lowest clock is not the cheapest (Table I's lesson).
- SLOs (DynamoLLM Table IV): TTFT 250/400/2000 ms by input class; TBT 100 ms (unverified
  default from the seed).
"""

from __future__ import annotations

import math
from typing import Final

from services.planner.problem import (
    IntensityUnit,
    PartitionScheme,
    PlanningProblem,
    ServingConfig,
    SloPolicy,
)

__all__ = [
    "DYNAMOLLM_CLASS_MIX",
    "DYNAMOLLM_CLOCKS_MHZ",
    "DYNAMOLLM_PARTITION",
    "dynamollm_configs",
    "dynamollm_problem",
    "dynamollm_slo",
]

DYNAMOLLM_PARTITION: Final = "dynamollm9"
DYNAMOLLM_CLOCKS_MHZ: Final = (800.0, 1000.0, 1200.0, 1400.0, 1600.0, 1800.0, 1980.0)
DYNAMOLLM_CLASS_MIX: Final = {
    "SS": 0.14, "SM": 0.18, "SL": 0.01, "MS": 0.05, "MM": 0.06,
    "ML": 0.22, "LS": 0.14, "LM": 0.09, "LL": 0.11,
}  # fmt: skip
"""Request mix of the 1-h Conversation run (seed 001 §5)."""

_TOKENS: Final = {"S": (128, 50), "M": (600, 200), "L": (2500, 600)}
_DECODE_TPS: Final = {2: 1200.0, 4: 2600.0, 8: 4400.0}
_PREFILL_TPS: Final = {2: 6000.0, 4: 12000.0, 8: 20000.0}
_TBT_MS: Final = {2: 60.0, 4: 40.0, 8: 30.0}
_MAX_CLOCK_MHZ: Final = 1980.0
_IDLE_W: Final = 69.0
_DYNAMIC_W: Final = 531.0
_UTILISATION: Final = 0.85
_SUSTAINED_SHARE: Final = 0.7
_TTFT_QUEUEING: Final = 3.0


def dynamollm_slo() -> SloPolicy:
    """DynamoLLM's SLOs: TTFT by input class (Table IV), TBT 100 ms, no relative E2E limit."""
    ttft = {"S": 250.0, "M": 400.0, "L": 2000.0}
    return SloPolicy(
        e2e_mean_scale=None,
        tbt_ms=100.0,
        ttft_ms_by_class={cls: ttft[cls[0]] for cls in DYNAMOLLM_CLASS_MIX},
    )


def dynamollm_configs(
    clocks_mhz: tuple[float, ...] = DYNAMOLLM_CLOCKS_MHZ, gpu_type: str = "H100"
) -> tuple[ServingConfig, ...]:
    """Profile rows for 9 classes × TP 2/4/8 × ``clocks_mhz`` from the model above."""
    rows: list[ServingConfig] = []
    for cls in DYNAMOLLM_CLASS_MIX:
        prompt, output = _TOKENS[cls[0]][0], _TOKENS[cls[1]][1]
        for tp in (2, 4, 8):
            for clock in clocks_mhz:
                phi = clock / _MAX_CLOCK_MHZ
                decode_speed = 0.35 + 0.65 * phi
                decode_tps = _DECODE_TPS[tp] * decode_speed
                prefill_tps = _PREFILL_TPS[tp] * phi
                qps = _SUSTAINED_SHARE * min(decode_tps / output, prefill_tps / prompt)
                tbt_ms = _TBT_MS[tp] / decode_speed
                ttft_ms = _TTFT_QUEUEING * 1000.0 * prompt / prefill_tps + tbt_ms
                gpu_w = _IDLE_W + _DYNAMIC_W * phi**2.5 * _UTILISATION
                rows.append(
                    ServingConfig(
                        partition=DYNAMOLLM_PARTITION,
                        request_class=cls,
                        mode=f"{gpu_type}-tp{tp}",
                        gpu_type=gpu_type,
                        gpus=tp,
                        tensor_parallel=tp,
                        clock_mhz=clock,
                        power_w=round(tp * gpu_w, 3),
                        max_qps=round(qps, 4),
                        e2e_s=round((ttft_ms + output * tbt_ms) / 1000.0, 4),
                        tbt_ms=round(tbt_ms, 3),
                        ttft_ms=round(ttft_ms, 3),
                    )
                )
    return tuple(rows)


def dynamollm_problem(
    configs: tuple[ServingConfig, ...],
    *,
    regions: int = 3,
    nodes_per_region: int = 40,
    gpus_per_node: int = 8,
    peak_qps: float = 400.0,
    steps: int = 6,
    step_s: float = 300.0,
) -> PlanningProblem:
    """A DynamoLLM-scale epoch: ``regions`` × ``nodes_per_region`` 8-GPU H100 nodes.

    Demand is ``peak_qps`` split by the Conversation mix with a gentle ramp over the steps;
    intensity per region is a fixed level (250, 400, 550 g/kWh, …) with a ±15 % phase-shifted
    swing, so regions differ and change within the epoch.
    """
    names = tuple(f"region{index + 1}" for index in range(regions))
    gpu_types = sorted({c.gpu_type for c in configs})
    inventory = {(r, g): nodes_per_region * gpus_per_node for r in names for g in gpu_types}
    ramp = tuple(0.85 + 0.15 * math.sin(math.pi * (t + 1) / (steps + 1)) for t in range(steps))
    demand = {
        (DYNAMOLLM_PARTITION, cls): tuple(peak_qps * share * level for level in ramp)
        for cls, share in DYNAMOLLM_CLASS_MIX.items()
    }
    intensity = {
        region: tuple(
            (250.0 + 150.0 * index) * (1.0 + 0.15 * math.sin(2 * math.pi * t / steps + index))
            for t in range(steps)
        )
        for index, region in enumerate(names)
    }
    return PlanningProblem(
        regions=names,
        configs=configs,
        inventory=inventory,
        demand_qps=demand,
        intensity=intensity,
        partitions={
            DYNAMOLLM_PARTITION: PartitionScheme(
                name=DYNAMOLLM_PARTITION, input_edges=(256, 1024), output_edges=(100, 350)
            )
        },
        intensity_unit=IntensityUnit.G_PER_KWH,
        step_s=step_s,
        alpha=1.1,
        slo=dynamollm_slo(),
    )
