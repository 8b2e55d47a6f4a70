"""Typed loader of the FREESH pool-planning instance, and of profile CSVs in its format.

The instance (seed 000 §1–§3, Appendix A; ``../shared/data/freesh``): profiles per partition ×
request type × mode at maximum clock, GPU inventory per location, partition thresholds, 288
five-minute peak-QPS forecasts per partition, and PJM marginal emission rates (lb/MWh, 288 steps
× 3 locations, sometimes negative). One day is 48 episodes of 6 steps.

``profiles.csv`` may carry an extra ``clock_mhz`` column (DynamoLLM Eq. 1's frequency dimension,
as ``greenserve profile`` writes it); rows without it are at the GPU's maximum clock.

The loader functions are the only I/O here; :func:`episode_problem` is pure.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from services.planner.problem import (
    IntensityUnit,
    PartitionScheme,
    PlanningProblem,
    ServingConfig,
    SloPolicy,
)
from shared.paths import data_path

__all__ = [
    "FREESH_ALPHA",
    "FREESH_EPISODES",
    "FREESH_STEPS_PER_EPISODE",
    "FREESH_STEP_S",
    "FREESH_TRAFFIC_DIVISOR",
    "FreeshInstance",
    "episode_problem",
    "load_freesh",
    "load_profiles_csv",
    "write_profiles_csv",
]

FREESH_STEP_S: Final = 300.0
FREESH_STEPS_PER_EPISODE: Final = 6
FREESH_EPISODES: Final = 48
FREESH_ALPHA: Final = 1.1
FREESH_TRAFFIC_DIVISOR: Final = 2.0
"""β of the repo's day-long run: applied traffic = forecast / β (not in the paper)."""

_PROFILE_COLUMNS: Final = (
    "partition", "request_class", "mode", "gpu_type", "gpus", "tensor_parallel",
    "power_w", "max_qps", "e2e_s", "tbt_ms", "ttft_ms",
)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class FreeshInstance:
    """The whole FREESH day, as read from disk (traffic already divided by β)."""

    configs: tuple[ServingConfig, ...]
    inventory: dict[tuple[str, str], int]
    partitions: dict[str, PartitionScheme]
    demand_qps: dict[tuple[str, str], tuple[float, ...]]
    """Forecast peak QPS per (partition, request type), one value per 5-min step (288)."""
    intensity: dict[str, tuple[float, ...]]
    """Marginal emission rate per location (lb/MWh), one value per step (288)."""
    traffic_divisor: float

    @property
    def regions(self) -> tuple[str, ...]:
        """Locations in file order."""
        return tuple(self.intensity)

    @property
    def steps(self) -> int:
        """Number of 5-min steps in the day."""
        return len(next(iter(self.intensity.values())))


def _read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def load_profiles_csv(path: Path) -> tuple[ServingConfig, ...]:
    """Read serving configurations from a FREESH-format profiles CSV.

    Columns: partition, request_type (or request_class), mode, gpu_type, gpus,
    tensor_parallel, power_w, max_qps, e2e_s, tbt_ms, ttft_ms, and optionally clock_mhz.

    Raises:
        ValueError: a required column is missing.
    """
    rows = _read_rows(path)
    configs: list[ServingConfig] = []
    for row in rows:
        if "request_class" not in row and "request_type" in row:
            row["request_class"] = row["request_type"]
        missing = [c for c in _PROFILE_COLUMNS if c not in row]
        if missing:
            raise ValueError(f"{path}: missing columns {missing}")
        clock = row.get("clock_mhz", "")
        configs.append(
            ServingConfig(
                partition=row["partition"],
                request_class=row["request_class"],
                mode=row["mode"],
                gpu_type=row["gpu_type"],
                gpus=int(row["gpus"]),
                tensor_parallel=int(row["tensor_parallel"]),
                clock_mhz=float(clock) if clock not in ("", None) else None,
                power_w=float(row["power_w"]),
                max_qps=float(row["max_qps"]),
                e2e_s=float(row["e2e_s"]),
                tbt_ms=float(row["tbt_ms"]),
                ttft_ms=float(row["ttft_ms"]),
            )
        )
    return tuple(configs)


def write_profiles_csv(path: Path, configs: tuple[ServingConfig, ...]) -> None:
    """Write configurations in the FREESH profiles format plus ``clock_mhz``."""
    header = [
        "partition", "request_type", "mode", "gpu_type", "gpus", "tensor_parallel",
        "power_w", "max_qps", "e2e_s", "tbt_ms", "ttft_ms", "clock_mhz",
    ]  # fmt: skip
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for c in configs:
            writer.writerow(
                [
                    c.partition, c.request_class, c.mode, c.gpu_type, c.gpus, c.tensor_parallel,
                    c.power_w, c.max_qps, c.e2e_s, c.tbt_ms, c.ttft_ms,
                    "" if c.clock_mhz is None else c.clock_mhz,
                ]
            )  # fmt: skip


def load_freesh(
    directory: Path | None = None, *, traffic_divisor: float = FREESH_TRAFFIC_DIVISOR
) -> FreeshInstance:
    """Load the FREESH instance from ``directory`` (default: the data dir's ``freesh/``).

    Args:
        directory: folder holding the six FREESH CSV files.
        traffic_divisor: β; forecasts are divided by it (repo: 2).
    """
    if traffic_divisor <= 0:
        raise ValueError("traffic_divisor must be positive")
    folder = directory if directory is not None else data_path("freesh")
    configs = load_profiles_csv(folder / "profiles.csv")
    inventory = {
        (row["location"], row["gpu_type"]): int(row["gpus"])
        for row in _read_rows(folder / "inventory.csv")
    }
    partitions = {
        row["partition"]: PartitionScheme(
            name=row["partition"],
            input_edges=(int(row["input_threshold_tokens"]),),
            output_edges=(int(row["output_threshold_tokens"]),),
        )
        for row in _read_rows(folder / "partitions.csv")
    }
    demand: dict[tuple[str, str], tuple[float, ...]] = {}
    for name in partitions:
        rows = _read_rows(folder / f"forecast_qps_partition_{name}.csv")
        for cls in (c for c in rows[0] if c != "step"):
            demand[(name, cls)] = tuple(float(r[cls]) / traffic_divisor for r in rows)
    emission_rows = _read_rows(folder / "marginal_emissions_lb_per_mwh.csv")
    series: dict[str, list[float]] = defaultdict(list)
    for row in emission_rows:
        for location, value in row.items():
            if location != "step":
                series[location].append(float(value))
    return FreeshInstance(
        configs=configs,
        inventory=inventory,
        partitions=partitions,
        demand_qps=demand,
        intensity={loc: tuple(values) for loc, values in series.items()},
        traffic_divisor=traffic_divisor,
    )


def episode_problem(
    instance: FreeshInstance,
    episode: int,
    *,
    partitions: tuple[str, ...] | None = None,
    alpha: float = FREESH_ALPHA,
    slo: SloPolicy | None = None,
) -> PlanningProblem:
    """Cut one 30-min episode (6 steps) out of the day as a :class:`PlanningProblem`.

    Args:
        instance: the loaded day.
        episode: 0-based episode index (0–47).
        partitions: restrict to these partitions (``("a",)`` reproduces the repo's run).
        alpha: demand safety margin.
        slo: SLO filters; FREESH repo defaults when ``None``.
    """
    first = episode * FREESH_STEPS_PER_EPISODE
    last = first + FREESH_STEPS_PER_EPISODE
    if episode < 0 or last > instance.steps:
        raise ValueError(f"episode {episode} is outside the {instance.steps}-step day")
    keep = set(partitions) if partitions is not None else set(instance.partitions)
    return PlanningProblem(
        regions=instance.regions,
        configs=tuple(c for c in instance.configs if c.partition in keep),
        inventory=instance.inventory,
        demand_qps={k: v[first:last] for k, v in instance.demand_qps.items() if k[0] in keep},
        intensity={loc: v[first:last] for loc, v in instance.intensity.items()},
        partitions={k: v for k, v in instance.partitions.items() if k in keep},
        intensity_unit=IntensityUnit.LB_PER_MWH,
        step_s=FREESH_STEP_S,
        alpha=alpha,
        slo=slo or SloPolicy(),
    )
