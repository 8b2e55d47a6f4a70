"""Live planner cores: inventory, demand, intensity, slicing, wire plan, parking."""

from __future__ import annotations

import pytest

from proto.messages import Forecast, Plan, PoolPlan, RouteWeight, WorkerStats
from services.planner import epoch_step
from services.planner.live_inputs import (
    DemandTracker,
    LivePool,
    intensity_steps,
    pools_from_stats,
)
from services.planner.live_plan import (
    PoolDecision,
    build_live_problem,
    pool_allocations,
    pool_decisions,
)
from services.planner.live_profiles import (
    ProfileRequest,
    measure_mode_profiles,
    profiles_for_mode,
    scheme_name_for,
    slo_policy_for,
)
from services.planner.milp import solve_plan
from services.planner.plan_model import Plan as CorePlan
from services.planner.plan_wire import bootstrap_plan, wire_plan
from services.planner.problem import PlannerSettings, PlanningProblem, SloPolicy
from shared.domain.classes import dynamollm_scheme
from shared.domain.load_forecast import LoadForecastConfig
from shared.domain.plan import PlanFollower, parked_workers, pool_clock_caps, worker_order
from tests.unit.planner.helpers import config


def _stats(worker: str, pool: str, region: str, *, gpu: str = "A100-80GB") -> WorkerStats:
    return WorkerStats(
        worker_id=worker,
        pool_id=pool,
        region=region,
        node_id="n",
        gpu=gpu,
        model="m",
        tp=1,
        running=0,
        waiting=0,
        max_num_seqs=64,
        free_slots=64,
        kv_blocks_used=0,
        kv_blocks_total=1,
        clock_mhz=1410.0,
        power_w=60.0,
        energy_j=0.0,
        tokens_out=0,
        at=0.0,
    )


def test_pools_group_workers_by_pool_in_natural_id_order() -> None:
    """Test that pools list their workers with worker-2 before worker-10."""
    pools = pools_from_stats([_stats("worker-10", "p", "PJM"), _stats("worker-2", "p", "PJM")])
    assert pools["p"].workers == ("worker-2", "worker-10")
    assert pools["p"].region == "PJM"
    assert worker_order("worker-2") < worker_order("worker-10")


def test_demand_forecast_is_the_recent_peak_per_class() -> None:
    """Test that the forecast is the largest 5-s bin rate of the recent steps, per class."""
    config = LoadForecastConfig(bin_s=5.0, step_s=10.0, steps=3, method="recent_max")
    tracker = DemandTracker({"dynamollm9": dynamollm_scheme()}, config, history_steps=6)
    for k in range(10):  # SS: one arrival per second over 10 s
        tracker.add(100.0 + k, input_tokens=10, output_tokens=10)
    for k in range(3):  # LL: a burst of three within one bin
        tracker.add(105.0 + 0.1 * k, input_tokens=2000, output_tokens=500)
    forecast = tracker.forecast(
        120.0, [("dynamollm9", "SS"), ("dynamollm9", "LL"), ("dynamollm9", "MM")]
    )
    assert forecast[("dynamollm9", "SS")] == pytest.approx((1.0,) * 3)
    assert forecast[("dynamollm9", "LL")] == pytest.approx((0.6,) * 3)
    assert forecast[("dynamollm9", "MM")] == (0.0,) * 3


def test_demand_history_ends_one_latency_before_now() -> None:
    """Test that steps younger than the p90 latency do not count as observed yet."""
    config = LoadForecastConfig(bin_s=5.0, step_s=10.0, steps=1, method="last")
    tracker = DemandTracker({"dynamollm9": dynamollm_scheme()}, config, history_steps=6)
    tracker.add(0.0, 10, 10, latency_s=25.0)
    assert tracker.lag_s == pytest.approx(25.0)
    assert tracker.observed_steps(30.0) == 0
    assert tracker.observed_steps(45.0) == 2


def test_intensity_steps_sample_the_forecast_and_fall_back_to_the_last_value() -> None:
    """Test that steps map onto hourly values and a missing forecast repeats the last value."""
    forecast = Forecast(
        region="PJM", issued_at=0.0, start_s=0.0, step_s=3600, values=[100.0, 200.0], p10=[], p90=[]
    )
    assert intensity_steps(forecast, 3000.0, 300.0, 4, None) == (100.0, 100.0, 200.0, 200.0)
    assert intensity_steps(None, 0.0, 300.0, 2, 42.0) == (42.0, 42.0)
    assert intensity_steps(None, 0.0, 300.0, 2, None) is None


def test_profile_partitions_map_to_classifier_schemes_and_slos() -> None:
    """Test that FREESH partitions become freesh-* schemes and SLOs follow the classifier."""
    assert scheme_name_for("a") == "freesh-a"
    assert scheme_name_for("dynamollm9") == "dynamollm9"
    policy = slo_policy_for(["dynamollm9"])
    assert policy.ttft_ms_by_class["SS"] == 250.0
    assert policy.ttft_ms_by_class["LL"] == 2000.0
    rows = (config(gpu="A100", tp=1), config(gpu="H100", tp=1), config(gpu="A100", tp=2))
    assert profiles_for_mode(rows, ("a100", 1)) == (rows[0],)


def _solve(
    demand: dict[tuple[str, str], float], intensity: dict[str, float], slices: int
) -> tuple[dict[str, LivePool], PlanningProblem, CorePlan, dict[str, PoolDecision]]:
    pools = pools_from_stats(
        [
            _stats("worker-1", "ciso", "CISO"),
            _stats("worker-3", "ciso", "CISO"),
            _stats("worker-2", "pjm", "PJM"),
            _stats("worker-4", "pjm", "PJM"),
        ]
    )
    rows = (
        config(partition="dynamollm9", cls="SS", tp=1, qps=4.0, power=400.0),
        config(partition="dynamollm9", cls="SS", tp=1, qps=2.0, power=150.0, clock=705.0),
        config(partition="dynamollm9", cls="LL", tp=1, qps=1.0, power=400.0),
    )
    problem = build_live_problem(
        pools=pools,
        profiles=dict.fromkeys(pools, rows),
        demand_qps={k: (v,) * 6 for k, v in demand.items()},
        intensity={r: (v,) * 6 for r, v in intensity.items()},
        step_s=300.0,
        alpha=1.0,
        slo=SloPolicy(e2e_mean_scale=None),
        slices=slices,
    )
    plan = solve_plan(problem)
    return pools, problem, plan, pool_decisions(plan, problem, pools, slices)


def test_time_shared_slices_let_one_instance_serve_two_classes() -> None:
    """Test that with 4 slices two small classes share one instance in the cleaner region."""
    demand = {("dynamollm9", "SS"): 1.0, ("dynamollm9", "LL"): 0.25}
    _, _, plan, decisions = _solve(demand, {"CISO": 200.0, "PJM": 400.0}, slices=4)
    assert plan.status.value == "optimal"
    assert decisions["ciso"].instances == 1
    assert decisions["pjm"].instances == 0
    assert set(decisions["ciso"].capacity_by_class) == {"SS", "LL"}
    assert decisions["ciso"].clock_mhz is None  # LL only has a max-clock row
    # Dedicated instances (FREESH, one slice per instance) need one per class.
    _, _, _, dedicated = _solve(demand, {"CISO": 200.0, "PJM": 400.0}, slices=1)
    assert dedicated["ciso"].instances == 2


def test_wire_plan_routes_classes_by_planned_capacity_and_keeps_busy_pools() -> None:
    """Test that routes follow capacity, '*' covers all active pools, busy pools keep one."""
    demand = {("dynamollm9", "SS"): 1.0, ("dynamollm9", "LL"): 0.25}
    pools, _, plan, decisions = _solve(demand, {"CISO": 200.0, "PJM": 400.0}, slices=4)
    wire = wire_plan(
        decisions=decisions,
        pools=pools,
        partition=plan.partition,
        epoch=3,
        issued_at=1.0,
        valid_until=2.0,
        objective="carbon",
        status="optimal",
        keep_one=frozenset({"pjm"}),
    )
    assert wire.scheme == "dynamollm9"
    by_pool = {p.pool_id: p for p in wire.pools}
    assert by_pool["ciso"].instances == 1
    assert by_pool["pjm"].instances == 1  # kept for its queue, but routed nothing
    assert [w.pool_id for w in wire.routes["*"]] == ["ciso"]
    assert [w.pool_id for w in wire.routes["LL"]] == ["ciso"]
    allocations = pool_allocations(decisions, pools)
    assert [a.gpu_type for a in allocations] == ["ciso"]


def test_wire_plan_never_publishes_an_empty_route_table() -> None:
    """Test that with no demand the first pool of the fallback order serves '*'."""
    pools, _, _, decisions = _solve({}, {"CISO": 200.0, "PJM": 400.0}, slices=4)
    assert all(d.instances == 0 for d in decisions.values())
    wire = wire_plan(
        decisions=decisions,
        pools=pools,
        partition="dynamollm9",
        epoch=0,
        issued_at=0.0,
        valid_until=1.0,
        objective="carbon",
        status="optimal",
        fallback_order=("ciso", "pjm"),
    )
    assert [w.pool_id for w in wire.routes["*"]] == ["ciso"]
    assert {p.pool_id: p.instances for p in wire.pools} == {"ciso": 1, "pjm": 0}
    boot = bootstrap_plan(pools, scheme="dynamollm9", epoch=0, issued_at=0.0, valid_until=1.0)
    assert {w.pool_id: w.weight for w in boot.routes["*"]} == {"ciso": 2.0, "pjm": 2.0}


def _plan(objective: str, instances: int, clock: float | None = 1050.0) -> Plan:
    return Plan(
        epoch=1,
        issued_at=0.0,
        valid_until=1.0,
        scheme="dynamollm9",
        objective=objective,
        pools=[
            PoolPlan(
                pool_id="p", region="PJM", gpu="A100", tp=1, instances=instances, clock_mhz=clock
            )
        ],
        routes={"*": [RouteWeight(pool_id="p", weight=1.0)]},
    )


def test_workers_beyond_the_planned_count_park_by_id_order() -> None:
    """Test that the highest-ranked worker ids park and static plans park nobody."""
    assert parked_workers(["worker-10", "worker-2", "worker-1"], 1) == {"worker-2", "worker-10"}
    follower = PlanFollower("worker-10", "p", member_ttl_s=3.0)
    follower.on_peer(_stats("worker-2", "p", "PJM"), now_wall=100.0)
    follower.on_plan(_plan("static", 1))
    assert not follower.parked(100.5)
    follower.on_plan(_plan("carbon", 1))
    assert follower.parked(100.5)
    assert not follower.parked(104.0)  # worker-2's heartbeat expired: worker-10 must serve


def test_only_enforced_plans_cap_pool_clocks() -> None:
    """Test that MILP plans give clock caps and static plans none."""
    assert pool_clock_caps(_plan("energy", 1)) == {"p": 1050.0}
    assert pool_clock_caps(_plan("static", 1)) == {}
    assert pool_clock_caps(_plan("carbon", 1, clock=None)) == {}


def test_startup_profiles_measure_every_class_at_each_clock() -> None:
    """Test that the start-up sweep gives one row per class and clock, slower clocks cheaper."""
    rows = measure_mode_profiles(
        ProfileRequest(
            gpu="A100-80GB",
            tp=1,
            model="llama-3-8b",
            scheme="dynamollm9",
            clock_fractions=(1.0, 0.5),
            window_s=15.0,
            tolerance=0.3,
        )
    )
    assert {(r.request_class, r.clock_mhz) for r in rows} == {
        (cls, clock) for cls in dynamollm_scheme().classes for clock in (1410.0, 705.0)
    }
    by_key = {(r.request_class, r.clock_mhz): r for r in rows}
    assert all(r.gpu_type == "A100" and r.tensor_parallel == 1 for r in rows)
    assert by_key[("SS", 705.0)].power_w < by_key[("SS", 1410.0)].power_w
    assert by_key[("SS", 1410.0)].max_qps > 0


def test_the_epoch_step_decides_each_pool_and_orders_the_fallback_cleanest_first() -> None:
    """Test the epoch step both planners call: the solve's pool decisions, and the pools
    ordered by their region's forecast over the epoch (ties by id)."""
    demand = {("dynamollm9", "SS"): 1.0, ("dynamollm9", "LL"): 0.25}
    pools, problem, _, decisions = _solve(demand, {"CISO": 400.0, "PJM": 200.0}, slices=4)
    forecast = {"CISO": (400.0,) * 6, "PJM": (200.0,) * 6}
    epoch = epoch_step.step(problem, PlannerSettings(), pools, 4, forecast)
    assert epoch.core.status.value == "optimal"
    assert epoch.decisions == decisions
    assert epoch.decisions["pjm"].instances == 1
    assert epoch.fallback_order == ("pjm", "ciso")
    level = {"CISO": (300.0,) * 6, "PJM": (300.0,) * 6}
    assert epoch_step.step(problem, PlannerSettings(), pools, 4, level).fallback_order == (
        "ciso",
        "pjm",
    )
