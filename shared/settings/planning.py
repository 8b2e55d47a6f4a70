"""Settings of the carbon forecaster and the planner."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PositiveFloat

from shared.settings.section import _Section
from shared.zones import LiveProvider, ZoneSettings

__all__ = ["ForecasterSettings", "PlannerSettings"]


class ForecasterSettings(_Section):
    """Forecaster: carbon intensity per region."""

    regions: tuple[str, ...] = ("CISO", "PJM", "BPAT")
    """Zones forecast, each ``eia:<BA>`` (``carbon/<BA>.csv``) or ``em:<ZONE>``
    (``carbon_em/<ZONE>_<year>.csv``); a bare code names the one source with a file for it,
    or ``source``'s (:mod:`shared.zones`)."""
    source: Literal["eia", "em"] | None = None
    """Source of bare codes in ``regions``; ``None``: the one source with a file for it."""
    zones: dict[str, ZoneSettings] = Field(default_factory=dict)
    """Per-zone settings by ``source:code`` (files, time zone, holiday calendar, live
    provider): a zone the defaults do not cover is added here, not in code."""
    mode: Literal["replay", "live"] = "replay"
    """``replay``: forecasts from the data files on the stack's model clock, every answer
    stamped with the data's time and marked ``replay``; ``live``: wall-clock time, current
    and forecast intensity from the zone's provider API (docs/forecaster.md, *Live and
    replay*)."""
    live_poll_s: dict[LiveProvider, PositiveFloat] = Field(default_factory=dict)
    """Poll period per live provider (``electricitymaps``, ``watttime``, ``eia``) in wall
    seconds; a provider not named polls at its own cadence (services/forecaster/live.py)."""
    live_urls: dict[LiveProvider, str] = Field(default_factory=dict)
    """Base URL per live provider, for a proxy or a local stand-in; default: the public API."""
    refresh_s: float = 300.0
    horizon_h: int = 24
    model_cache_dir: Path | None = None
    """Keep fitted models here (operator-owned) so a restart reuses them; ``None``: refit."""
    refit_days: float = Field(default=30.0, ge=0.0)
    """Re-estimate every region's model on all history before model time ``now`` this often
    (model days; 0: only at start-up). 30, the cadence ``greenserve bench forecaster``
    measures (docs/forecaster.md); the old models serve until the new ones are fitted."""


class PlannerSettings(_Section):
    """Planner: pool plan every epoch."""

    epoch_s: float = 1800.0
    republish_wall_s: float = 2.0
    """Re-publish the current plan this often (wall), for late joiners and a restarted Redis."""
    follower_max_epochs_ahead: int = Field(default=2, ge=0)
    """Followers believe a plan on the bus at most this many epochs past the plan in force
    and their own clock's epoch; beyond it only the stored plan vouches (shared.plan_watch)."""
    mode: str = "milp"
    """``milp`` (the default, the headline's planner: FREESH Eq. 1 every epoch over the
    workers that registered, ``services/planner/live_service.py``) or ``static`` (the
    pools of ``static_pools``, every class to every pool)."""
    static_pools: tuple[dict[str, Any], ...] = (
        {"pool_id": "main", "region": "PJM", "gpu": "A100-80GB", "tp": 1, "instances": 1},
    )
    """Pools of the static plan (fields of ``proto.messages.PoolPlan``)."""
    scheme: str = "dynamollm9"
    """Class scheme of the static plan, and of the start-up profiles in ``milp`` mode."""
    objective: str = "energy"
    """``milp`` objective: ``carbon`` (forecast intensity × power × time) or ``energy``
    (FREESH's MinEnergy; with ``primary_slack``, least carbon within that share of it)."""
    solver: str = "highs"
    """``highs`` (in process) or ``cbc``."""
    time_limit_s: float = Field(default=5.0, gt=0.0)
    """Wall limit of one epoch's solve; the core falls back to a feasible plan beyond it."""
    mip_rel_gap: float = Field(default=1e-4, ge=0.0)
    """Relative MIP gap; well below ``primary_slack``, so that near-equal plans do not decide
    the region from one solve to the next (docs/simulator.md, "Planner modes")."""
    alpha: float = Field(default=1.1, gt=0.0)
    """Safety margin on forecast peak demand (FREESH Eq. 1b)."""
    steps_per_epoch: int = Field(default=6, ge=1)
    """Planning steps per epoch (FREESH: six 5-min steps); step = epoch_s / steps."""
    demand_bin_s: float = Field(default=5.0, gt=0.0)
    """Arrivals are counted in bins this long (model s); a step's peak QPS = max bin / bin."""
    demand_history_steps: int = Field(default=12, ge=1)
    """Past steps of observed arrivals kept for the load forecast."""
    load_method: str = "recent_max"
    """Load forecaster of ``shared.domain.load_forecast``: recent_max, ewma, last."""
    recent_steps: int = Field(default=3, ge=1)
    profiles_csv: Path | None = None
    """FREESH-format profiles (+ ``clock_mhz``, as ``greenserve profile`` writes them); modes
    it lacks are measured on the engine model at start-up."""
    profile_clock_fractions: tuple[float, ...] = (1.0, 0.75, 0.5)
    """Clocks (fractions of the GPU's maximum) measured when profiling at start-up."""
    profile_window_s: float = Field(default=30.0, gt=0.0)
    """Engine seconds of Poisson arrivals per start-up measurement (short; see planner.md)."""
    time_share_slices: int = Field(default=16, ge=1)
    """Live pools serve every class: an instance is planned in 1/slices shares of its time
    (1 = FREESH's dedicated instances per class)."""
    class_groups: Literal["none", "input-split"] = "input-split"
    """``input-split``: each pool serves the long-input classes (the scheme's last input
    bucket, ≥ 1024 prompt tokens for ``dynamollm9``) or the others, never both (an exclusive
    group per pool in Eq. 1; needs at least two pools, else it is not applied; a fleet of one
    pool per region puts one group in the dirtier region, docs/planner.md "Input groups")."""
    mixed_capacity: bool = True
    """Scale each mode's rows by the capacity measured on the trace's class mix (per group
    when ``class_groups`` applies) on the engine model, at the profiles' percentile; ≈ 1 s
    per mode for Llama-3-8B on one A100, added to the start-up profiling."""
    coincident_demand: bool = True
    """Size each class for its share of the step's arrivals × the peak bin rate of all
    arrivals, not its own peak bin rate (classes sharing a pool do not peak together; the
    simulator's ``min-energy-modes`` does, docs/simulator.md "Planner modes")."""
    whole_instances: bool = True
    """Plan whole instances at their idle power (the engine model's, per mode), so a pool's
    last, partly used instance is priced in full; pools of one (region, GPU type) share its
    GPUs (a TP4 and a TP8 pool over the same GPUs: the MILP chooses the mode)."""
    primary_slack: float = Field(default=0.05, ge=0.0)
    """Share of the objective's optimum its tie-break may spend (energy objective: least
    carbon within this share of the least energy; 0.05 chosen on minutes 10-30 of conv among
    0, 0.05 and 0.3, docs/simulator.md "Planner modes")."""
    observed_profiles: bool = True
    """Re-measure the profiles on the served request sizes when they drift from the ones
    profiled (``shared/domain/observed_mix.py``): a mix the planner did not expect."""
    observed_sample: int = Field(default=2000, ge=1)
    observed_min_requests: int = Field(default=300, ge=1)
    slo_feedback: bool = True
    """Re-plan when a pool misses its SLO significantly more than the 1 % goal allows, with
    its capacity cut and its clock at the maximum (``services/planner/slo_feedback.py``)."""
    feedback_step: float | None = Field(default=0.8, gt=0.0, le=1.0)
    """The most one miss window cuts a pool's planned capacity (a factor); ``None``: down to
    the load it missed at."""
    feedback_floor: float = Field(default=0.3, ge=0.0, le=1.0)
    """The least capacity share SLO feedback leaves a pool."""
    feedback_boost: bool = True
    """A pool that missed runs at its maximum clock for one planning step."""
    feedback_replan: bool = False
    """A miss also cuts the pool's planned capacity and re-plans; ``False``: clock only.
    Off: on the code trace the re-plans' instance moves cost more SLO than they restored
    (86.7 % with the clock boost alone against 77-85 % with re-plans, docs/simulator.md
    "SLO feedback")."""
    feedback_grow: int = Field(default=1, ge=0)
    """The most instances added for a pool whose load outgrew its plan and that still misses
    at the maximum clock (boosted, and its requests since the boost miss significantly),
    before the next plan: one at a time, in the pool or, with its region full, in a pool of
    its mode elsewhere; no re-plan, no TP-mode switch (``slo_feedback.CapacityFeedback``).
    Measured in docs/simulator.md "Added instances": never fires on ``conv``; on ``code``
    1 gives 98.0 → 98.5 % SLO at +7.5 % energy."""
    park_workers: bool = True
    """Workers beyond their pool's planned instances park (``milp`` plans only)."""
    drain_grace_wall_s: float = Field(default=2.0, ge=0.0)
    """A pool planned to zero keeps one worker while its queue reported work this recently."""
    gate_margin: float = Field(default=1.0, ge=0.0)
    """Switch plans when saving > margin × transition cost (DynamoLLM overhead gate)."""
    start_s: float = Field(default=33.0, ge=0.0)
    """Assumed start-up time of one instance (DynamoLLM Table V, weights cached)."""
    start_power_w_per_gpu: float = Field(default=110.0, ge=0.0)
