"""The scenario file: regions, GPU inventory, model, SLOs, delays, control periods, policies.

A scenario is YAML validated once by pydantic (unknown keys are errors, so a typo never
silently falls back to a default). Every delay and period is a named setting with its unit in
its name. See ``scenarios/three_region.yaml`` and ``docs/simulator.md``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "ControlSettings",
    "DelaySettings",
    "EngineSettings",
    "NodeSettings",
    "RegionSpec",
    "Scenario",
    "SloSettings",
    "load_scenario",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RegionSpec(_Strict):
    """One region: its grid (carbon source) and its GPUs by type."""

    name: str
    carbon: str
    """Grid zone whose hourly intensity prices this region's energy: ``eia:<BA>``,
    ``em:<ZONE>`` or a bare code one source has a file for (:mod:`shared.zones`)."""
    gpus: dict[str, int]
    """GPU count per GPU type name (``H100-80GB``, ``A100-80GB``)."""

    @field_validator("gpus")
    @classmethod
    def _positive(cls, value: dict[str, int]) -> dict[str, int]:
        if not value or any(n < 0 for n in value.values()):
            raise ValueError("gpus must name at least one type, with counts >= 0")
        return value


class SloSettings(_Strict):
    """Class scheme and latency targets (DynamoLLM Table IV by default)."""

    scheme: str = "dynamollm9"
    ttft_ms: dict[str, float] = Field(default_factory=dict)
    """Per-class TTFT overrides; unlisted classes use the scheme's defaults."""
    tbt_ms: float | None = None
    """TBT target for every class; ``None`` keeps the scheme's default."""
    alpha_llf: float = 1.4
    """FREESH α_LLF: deadline = arrival + α · Lat (Eq. 6)."""
    max_context_tokens: int = 32768
    """The classifier's context limit; the model's own context (``shared.engine``) caps it,
    so a request longer than the model can hold is rejected as the live classifier does."""


class EngineSettings(_Strict):
    """Engine arguments shared by every instance (vLLM names)."""

    max_num_seqs: int = 64
    max_num_batched_tokens: int = 8192


class DelaySettings(_Strict):
    """Reconfiguration costs (seeds: DynamoLLM §4.1 Table V, throttLL'eM overheads)."""

    instance_start_s: float = 33.0
    """Time from the decision to start an instance until it serves; it draws idle power."""
    clock_change_s: float = 0.008
    """Stall of an instance while its clock is being set."""
    node_power_on_s: float = Field(default=90.0, ge=0.0)
    """Boot of a powered-off node before its first instance starts loading (DynamoLLM
    Table V "create VM", ~1–2 min, with its mitigations: the VM boots from a snapshot with
    drivers, libraries and the engine initialised, and the weights are cached in the cluster,
    so neither the ~2 min distributed set-up nor the ~3 min download is paid). The node draws
    bare idle power meanwhile; ``instance_start_s`` follows."""


class NodeSettings(_Strict):
    """Whole servers: the unit that is powered on and off (DynamoLLM's 8-GPU DGX nodes)."""

    gpus_per_node: int = Field(default=8, ge=1)
    """GPUs of one node; a region's inventory of one GPU type fills nodes in order (the last
    one may be partial)."""
    bare_idle_share: float = Field(default=0.625, gt=0.0, le=1.0)
    """Idle power of a GPU on a powered node that holds no model, as a share of the engine's
    idle power with the model loaded: DynamoLLM Fig. 3 (Llama2-70B, 8 H100), 550 W idle
    without and 880 W with the model loaded, 550 / 880 = 0.625."""


class ControlSettings(_Strict):
    """Periods of the control loops and of the report's time series."""

    dvfs_period_s: float = 1.0
    scale_period_s: float = 300.0
    sample_period_s: float = 10.0
    epoch_s: float = 1800.0
    """Epoch of the planner (``planned`` policy sets; the live ``planner.epoch_s``)."""
    steps_per_epoch: int = 6
    """Demand/intensity steps per epoch (FREESH: six 5-minute steps)."""
    stats_period_s: float = 0.5
    """Worker stats heartbeat (``worker.stats_period_s``): how stale the live router's KV
    view is, for policies with ``router_view = "stats"``. In model seconds: a live stack
    at speed-up K has ``K × 0.5``."""
    stats_phase_s: float = Field(default=0.0, ge=0.0)
    """Where in its period the heartbeat falls, every worker's at once (0: at multiples of
    the period). Which near-simultaneous arrivals the router sees apart depends on it: a
    class's p90 TTFT moves by up to 140 ms over the phases of a 200-request window
    (``tests/e2e/test_sim_equivalence.py`` sweeps it)."""


class Scenario(_Strict):
    """A whole simulated deployment."""

    name: str
    model: str
    start_utc: datetime
    """Wall-clock time of simulated second 0, for the carbon lookup."""
    regions: list[RegionSpec]
    slo: SloSettings = SloSettings()
    engine: EngineSettings = EngineSettings()
    delays: DelaySettings = DelaySettings()
    nodes: NodeSettings = NodeSettings()
    control: ControlSettings = ControlSettings()
    policies: list[str] = Field(default_factory=lambda: ["single-pool", "greenserve"])
    """Policy sets compared by default (names from :mod:`loadgen.simulator.policies`)."""

    @field_validator("start_utc")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    @field_validator("regions")
    @classmethod
    def _unique(cls, value: list[RegionSpec]) -> list[RegionSpec]:
        names = [r.name for r in value]
        if not names or len(set(names)) != len(names):
            raise ValueError("regions must be a non-empty list of unique names")
        return value

    @property
    def total_gpus(self) -> int:
        """GPUs in the whole inventory."""
        return sum(sum(r.gpus.values()) for r in self.regions)


def load_scenario(path: Path | str) -> Scenario:
    """Read and validate a scenario YAML file.

    Raises:
        pydantic.ValidationError: for a malformed scenario.
        FileNotFoundError: when the file does not exist.
    """
    raw: Any = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    return Scenario.model_validate(raw)
