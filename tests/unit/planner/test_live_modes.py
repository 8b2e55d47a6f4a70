"""Whole instances, TP modes over shared GPUs and coincident demand in the live planner."""

from __future__ import annotations

import pytest

from services.planner.live_inputs import DemandTracker, LivePool
from services.planner.live_plan import build_live_problem, pool_decisions
from services.planner.milp import solve_plan
from services.planner.problem import GpuGroup, InstanceUnit, Objective, PlannerSettings, SloPolicy
from shared.domain.classes import dynamollm_scheme
from shared.domain.load_forecast import LoadForecastConfig
from tests.unit.planner.helpers import STEPS, config

ENERGY = PlannerSettings(objective=Objective.ENERGY, mip_rel_gap=1e-6)


def _pool(pool_id: str, region: str, tp: int, workers: int, gpu: str = "H100") -> LivePool:
    return LivePool(
        pool_id=pool_id,
        region=region,
        gpu=gpu,
        tp=tp,
        model="m",
        workers=tuple(f"{pool_id}#{k}" for k in range(workers)),
    )


def _decide(
    pools: dict[str, LivePool],
    rows: dict[str, tuple[float, float]],
    demand_qps: float,
    status: str = "optimal",
    **whole: object,
) -> dict[str, int]:
    """Instances per pool for SS demand; ``rows``: pool → (max QPS, power W) of one row."""
    problem = build_live_problem(
        pools=pools,
        profiles={
            pid: (config(partition="dynamollm9", cls="SS", tp=pools[pid].tp, qps=q, power=w),)
            for pid, (q, w) in rows.items()
        },
        demand_qps={("dynamollm9", "SS"): (demand_qps,) * STEPS},
        intensity=dict.fromkeys({p.region for p in pools.values()}, (100.0,) * STEPS),
        step_s=300.0,
        alpha=1.0,
        slo=SloPolicy(e2e_mean_scale=None),
        slices=4,
        **whole,  # type: ignore[arg-type]
    )
    plan = solve_plan(problem, ENERGY)
    assert plan.status.value == status
    return {pid: d.instances for pid, d in pool_decisions(plan, problem, pools, 4).items()}


def test_slices_alone_spread_load_over_pools_that_whole_instances_consolidate() -> None:
    """Test that without whole instances each class goes to the pool whose row is cheapest
    for it (two pools, one partly used instance each: a partial instance costs only its
    share), while with each instance's idle power counted one instance serves both."""
    pools = {"a": _pool("a", "A", 4, 2), "b": _pool("b", "B", 4, 2)}
    rows = {
        "a": (config(partition="dynamollm9", cls="SS", tp=4, qps=4.0, power=400.0),
              config(partition="dynamollm9", cls="LL", tp=4, qps=4.0, power=440.0)),
        "b": (config(partition="dynamollm9", cls="SS", tp=4, qps=4.0, power=440.0),
              config(partition="dynamollm9", cls="LL", tp=4, qps=4.0, power=400.0)),
    }  # fmt: skip

    def instances(**whole: object) -> dict[str, int]:
        problem = build_live_problem(
            pools=pools,
            profiles=rows,
            demand_qps={("dynamollm9", c): (1.0,) * STEPS for c in ("SS", "LL")},
            intensity={"A": (100.0,) * STEPS, "B": (100.0,) * STEPS},
            step_s=300.0,
            alpha=1.0,
            slo=SloPolicy(e2e_mean_scale=None),
            slices=4,
            **whole,  # type: ignore[arg-type]
        )
        plan = solve_plan(problem, ENERGY)
        assert plan.status.value == "optimal"
        return {pid: d.instances for pid, d in pool_decisions(plan, problem, pools, 4).items()}

    assert instances() == {"a": 1, "b": 1}
    assert sorted(instances(instance_idle_w={"a": 200.0, "b": 200.0}).values()) == [0, 1]


def test_tp_modes_over_shared_gpus_compete_for_them_and_the_cheaper_mode_wins() -> None:
    """Test that a TP4 and a TP8 pool over one region's 8 GPUs never hold more than 8 GPUs
    together, and that the MILP picks the mode whose instances cost less for the demand."""
    pools = {"tp4": _pool("tp4", "A", 4, 2), "tp8": _pool("tp8", "A", 8, 1)}
    shared = {("A", "H100"): 8}
    rows = {"tp4": (2.0, 500.0), "tp8": (5.0, 900.0)}
    idle = {"tp4": 300.0, "tp8": 600.0}
    low = _decide(pools, rows, 1.5, instance_idle_w=idle, shared_gpus=shared)
    assert low == {"tp4": 1, "tp8": 0}  # one TP4 instance carries 1.5 QPS for 500 W
    high = _decide(pools, rows, 4.5, instance_idle_w=idle, shared_gpus=shared)
    assert high == {"tp4": 0, "tp8": 1}  # 2 × TP4 carry only 4 QPS
    # 6 QPS: one TP8 and one TP4 (12 GPUs) when the pools' GPUs are their own; over the
    # shared 8 GPUs no plan covers it, and the shortfall plan still holds at most 8.
    cheap = {"tp4": (2.0, 100.0), "tp8": (5.0, 100.0)}
    own = _decide(pools, cheap, 6.0, instance_idle_w=idle)
    assert own == {"tp4": 1, "tp8": 1}
    both = _decide(pools, cheap, 6.0, "fallback_shortfall", instance_idle_w=idle,
                   shared_gpus=shared)  # fmt: skip
    assert 4 * both["tp4"] + 8 * both["tp8"] <= 8


def test_powered_nodes_make_the_plan_fill_one_node_before_opening_another() -> None:
    """Test that with the bare power of free GPUs on powered nodes the plan packs two TP4
    instances onto one region's node rather than one in each region."""
    pools = {"a": _pool("a", "A", 4, 2), "b": _pool("b", "B", 4, 2)}
    rows = {"a": (2.0, 400.0), "b": (2.0, 390.0)}
    idle = {"a": 300.0, "b": 300.0}
    without = _decide(pools, rows, 3.0, instance_idle_w=idle)
    assert sum(without.values()) == 2
    packed = _decide(pools, rows, 3.0, instance_idle_w=idle, bare_w_per_gpu={"H100": 50.0})
    assert sorted(packed.values()) == [0, 2]


def test_instance_units_need_their_gpu_group() -> None:
    """Test that a unit naming a GPU group the problem lacks is rejected with a clear error."""
    unit = InstanceUnit(region="A", gpu_type="p", slices=4, gpus=4, idle_w=1.0, group="H100")
    with pytest.raises(ValueError, match="without a GPU group"):
        build_problem_with(unit, ())
    build_problem_with(unit, (GpuGroup(region="A", name="H100", gpus=8),))


def build_problem_with(unit: InstanceUnit, groups: tuple[GpuGroup, ...]) -> None:
    """A one-row problem with ``unit`` and ``groups`` (raises what the problem raises)."""
    from services.planner.problem import PlanningProblem

    PlanningProblem(
        regions=("A",),
        configs=(config(gpu="p", tp=1),),
        inventory={("A", "p"): 8},
        demand_qps={("a", "SS"): (1.0,) * STEPS},
        intensity={"A": (1.0,) * STEPS},
        instance_units=(unit,),
        gpu_groups=groups,
    )


def test_coincident_demand_shares_the_total_peak_by_class_share() -> None:
    """Test that with coincident demand each class gets its share of the step's arrivals
    times the peak bin rate of all arrivals, not its own peak, so the sum over classes is
    the total's peak (the per-class peaks of bursts at different times add up to more)."""
    cfg = LoadForecastConfig(bin_s=5.0, step_s=10.0, steps=1, method="recent_max")
    keys = [("dynamollm9", "SS"), ("dynamollm9", "LL")]
    trackers = [
        DemandTracker({"dynamollm9": dynamollm_scheme()}, cfg, 6, coincident=c)
        for c in (False, True)
    ]
    for tracker in trackers:
        for k in range(3):  # SS: a burst of 3 in the first bin, LL: 1 in the second
            tracker.add(100.0 + 0.1 * k, input_tokens=10, output_tokens=10)
        tracker.add(106.0, input_tokens=2000, output_tokens=500)
    own = trackers[0].forecast(110.0, keys)
    shared = trackers[1].forecast(110.0, keys)
    assert own[keys[0]][0] + own[keys[1]][0] == pytest.approx(0.8)
    assert shared[keys[0]][0] == pytest.approx(0.6 * 3 / 4)
    assert shared[keys[1]][0] == pytest.approx(0.6 * 1 / 4)


def test_primary_slack_trades_bounded_energy_for_carbon() -> None:
    """Test that the energy objective with a slack picks the least-carbon plan within that
    share of the least energy, and keeps the least-energy plan when the cleaner one costs
    more than the slack."""
    from tests.unit.planner.helpers import problem

    rows = [config(gpu="H100", power=100.0, qps=1.0), config(gpu="A100", power=115.0, qps=1.0)]
    epoch = problem(
        rows,
        demand={("a", "SS"): 1.0},
        inventory={("dirty", "H100"): 2, ("clean", "A100"): 2},
        intensity={"dirty": 400.0, "clean": 30.0},
    )

    def region(slack: float) -> str:
        plan = solve_plan(epoch, PlannerSettings(objective=Objective.ENERGY, primary_slack=slack))
        assert plan.status.value == "optimal"
        return {a.region for a in plan.allocations if a.instances}.pop()

    assert region(0.0) == "dirty"
    assert region(0.1) == "dirty"  # the A100 costs 15 % more energy
    assert region(0.2) == "clean"
    with pytest.raises(ValueError, match="primary_slack"):
        PlannerSettings(primary_slack=-0.1)


def test_live_settings_turn_the_planner_modes_on_and_idle_power_is_the_engines() -> None:
    """Test that the live planner's settings for coincident demand, whole instances and the
    primary slack default on (the headline's values) and validate, and that a mode's idle
    power is the engine's (all its GPUs, model loaded), growing with TP."""
    from services.planner.live_profiles import mode_idle_w
    from shared.config import PlannerSettings as LiveSettings
    from shared.engine.api import EngineConfig
    from shared.engine.simulated import create_engine

    live = LiveSettings()
    assert (live.coincident_demand, live.whole_instances, live.primary_slack) == (True, True, 0.05)
    assert LiveSettings(whole_instances=False, primary_slack=0.0).primary_slack == 0.0
    with pytest.raises(ValueError, match="primary_slack"):
        LiveSettings(primary_slack=-1.0)
    tp4 = mode_idle_w("H100-80GB", 4, "llama-3-70b", 64)
    engine = create_engine(EngineConfig(gpu="H100-80GB", model="llama-3-70b", tp=4))
    assert tp4 == pytest.approx(engine.idle_power_w)
    assert mode_idle_w("H100-80GB", 8, "llama-3-70b", 64) > tp4 > 0


def test_routes_weigh_each_pool_by_what_its_running_instances_serve() -> None:
    """Test that a pool whose instance the solution filled and one whose instance it left
    half unassigned get routes by their instances' capacity (equal here), not by the load
    the solution assigned them (2:1): a burst beyond the forecast then meets the same
    headroom in both, instead of landing first on the pool that was already full."""
    from services.planner.plan_wire import wire_plan

    pools = {"a": _pool("a", "A", 4, 1), "b": _pool("b", "B", 4, 2)}
    problem = build_live_problem(
        pools=pools,
        profiles={
            "a": (config(partition="dynamollm9", cls="SS", tp=4, qps=2.0, power=400.0),),
            "b": (config(partition="dynamollm9", cls="SS", tp=4, qps=2.0, power=400.0),),
        },
        demand_qps={("dynamollm9", "SS"): (3.0,) * STEPS},
        intensity={"A": (100.0,) * STEPS, "B": (300.0,) * STEPS},
        step_s=300.0,
        alpha=1.0,
        slo=SloPolicy(e2e_mean_scale=None),
        slices=4,
        instance_idle_w={"a": 200.0, "b": 200.0},
    )
    plan = solve_plan(problem, PlannerSettings(objective=Objective.CARBON, mip_rel_gap=1e-6))
    assert plan.status.value == "optimal"
    assigned = {
        pid: sum(a.instances for a in plan.allocations if a.gpu_type == pid) for pid in pools
    }
    assert assigned == {"a": 4, "b": 2}  # the cleaner region's instance is filled first
    decisions = pool_decisions(plan, problem, pools, 4)
    assert {pid: d.instances for pid, d in decisions.items()} == {"a": 1, "b": 1}
    assert decisions["a"].capacity_by_class["SS"] == pytest.approx(2.0)
    assert decisions["b"].capacity_by_class["SS"] == pytest.approx(2.0)
    wire = wire_plan(
        decisions=decisions, pools=pools, partition="dynamollm9", epoch=1, issued_at=0.0,
        valid_until=1.0, objective="carbon", status="optimal",
    )  # fmt: skip
    weights = {w.pool_id: w.weight for w in wire.routes["SS"]}
    assert weights["a"] == pytest.approx(weights["b"])
