"""Small hand-checkable planning problems shared by the planner tests."""

from __future__ import annotations

from services.planner.problem import PlanningProblem, ServingConfig, SloPolicy

__all__ = ["STEPS", "config", "problem"]

STEPS = 6


def config(
    *,
    cls: str = "SS",
    partition: str = "a",
    gpu: str = "A100",
    tp: int = 2,
    clock: float | None = None,
    power: float = 100.0,
    qps: float = 1.0,
    e2e: float = 1.0,
    tbt: float = 50.0,
    ttft: float = 100.0,
) -> ServingConfig:
    """One profile row with defaults that pass every FREESH SLO filter."""
    return ServingConfig(
        partition=partition,
        request_class=cls,
        mode=f"{gpu}-tp{tp}",
        gpu_type=gpu,
        gpus=tp,
        tensor_parallel=tp,
        clock_mhz=clock,
        power_w=power,
        max_qps=qps,
        e2e_s=e2e,
        tbt_ms=tbt,
        ttft_ms=ttft,
    )


def problem(
    configs: list[ServingConfig],
    *,
    demand: dict[tuple[str, str], float],
    inventory: dict[tuple[str, str], int],
    intensity: dict[str, float],
    slo: SloPolicy | None = None,
    region_share_limits: dict[tuple[str, str], float] | None = None,
) -> PlanningProblem:
    """A problem with constant demand and intensity over six 5-min steps and α = 1."""
    return PlanningProblem(
        regions=tuple(intensity),
        configs=tuple(configs),
        inventory=inventory,
        demand_qps={key: (qps,) * STEPS for key, qps in demand.items()},
        intensity={region: (value,) * STEPS for region, value in intensity.items()},
        alpha=1.0,
        slo=slo or SloPolicy(e2e_mean_scale=None),
        region_share_limits=region_share_limits or {},
    )
