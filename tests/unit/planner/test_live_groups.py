"""Live planner with exclusive input groups and mixed-class capacities (issue 6)."""

from __future__ import annotations

from proto.messages import WorkerStats
from services.planner.live_inputs import LivePool, pools_from_stats
from services.planner.live_plan import (
    PoolDecision,
    build_live_problem,
    input_groups,
    pool_decisions,
)
from services.planner.live_profiles import ModeProfileJob, ProfileRequest, live_mode_profiles
from services.planner.milp import solve_plan
from services.planner.plan_wire import wire_plan
from services.planner.problem import SloPolicy
from shared.domain.classes import dynamollm_scheme
from tests.unit.planner.helpers import config

SCHEME = dynamollm_scheme()
GROUPS = input_groups(SCHEME.classes, SCHEME.labels)


def _stats(worker: str, pool: str, region: str) -> WorkerStats:
    return WorkerStats(
        worker_id=worker, pool_id=pool, region=region, node_id="n", gpu="A100-80GB", model="m",
        tp=1, running=0, waiting=0, max_num_seqs=64, free_slots=64, kv_blocks_used=0,
        kv_blocks_total=1, clock_mhz=1410.0, power_w=60.0, energy_j=0.0, tokens_out=0, at=0.0,
    )  # fmt: skip


def _decide(groups: dict[str, str]) -> tuple[dict[str, LivePool], dict[str, PoolDecision]]:
    """SS and LL demand that one CISO instance can hold in 4 slices (cheapest unsplit)."""
    pools = pools_from_stats(
        [_stats(f"worker-{i}", p, p.upper()) for i, p in enumerate(("ciso", "ciso", "pjm", "pjm"))]
    )
    rows = (
        config(partition="dynamollm9", cls="SS", tp=1, qps=4.0, power=400.0),
        config(partition="dynamollm9", cls="LL", tp=1, qps=1.0, power=400.0),
    )
    problem = build_live_problem(
        pools=pools,
        profiles=dict.fromkeys(pools, rows),
        demand_qps={("dynamollm9", "SS"): (1.0,) * 6, ("dynamollm9", "LL"): (0.25,) * 6},
        intensity={"CISO": (200.0,) * 6, "PJM": (400.0,) * 6},
        step_s=300.0,
        alpha=1.0,
        slo=SloPolicy(e2e_mean_scale=None),
        slices=4,
        class_groups=groups,
    )
    plan = solve_plan(problem)
    assert plan.status.value == "optimal"
    return pools, pool_decisions(plan, problem, pools, 4)


def test_input_groups_set_the_long_input_bucket_apart() -> None:
    """Test that dynamollm9's L* classes (≥ 1024 prompt tokens) form the long group."""
    assert {c for c, g in GROUPS.items() if g == "long"} == {"LS", "LM", "LL"}
    assert len(GROUPS) == 9


def test_split_plan_gives_pools_disjoint_single_group_classes() -> None:
    """Test that with groups each pool is planned and routed one group only, every class
    of the scheme has a route to its own group's pool, and without groups it is mixed."""
    _, mixed = _decide({})
    assert set(mixed["ciso"].capacity_by_class) == {"SS", "LL"}  # one pool, both groups

    pools, decisions = _decide(GROUPS)
    held = {pid: set(d.capacity_by_class) for pid, d in decisions.items() if d.instances}
    assert sorted(held.values(), key=sorted) == [{"LL"}, {"SS"}]
    wire = wire_plan(
        decisions=decisions, pools=pools, partition="dynamollm9", epoch=1, issued_at=0.0,
        valid_until=1.0, objective="carbon", status="optimal", class_groups=GROUPS,
    )  # fmt: skip
    group_of_pool = {pid: GROUPS[next(iter(classes))] for pid, classes in held.items()}
    for cls in SCHEME.classes:
        targets = {w.pool_id for w in wire.routes[cls]}
        assert targets, cls
        assert {group_of_pool[p] for p in targets} == {GROUPS[cls]}, (cls, targets)
    listed = [set(p.classes) for p in wire.pools if p.instances]
    assert len(listed) == 2
    assert not listed[0] & listed[1]
    assert set().union(*listed) == set(SCHEME.classes)
    assert all(len({GROUPS[c] for c in classes}) == 1 for classes in listed)

    # Without groups the unplanned classes fall to '*' (every active pool), as before.
    plain = wire_plan(
        decisions=decisions, pools=pools, partition="dynamollm9", epoch=1, issued_at=0.0,
        valid_until=1.0, objective="carbon", status="optimal",
    )  # fmt: skip
    assert "MS" not in plain.routes
    assert len(plain.routes["*"]) == 2


def test_live_mode_profiles_scale_each_group_by_its_measured_mix() -> None:
    """Test that mixed capacity scales each (clock, group) by one measured factor."""
    request = ProfileRequest(
        gpu="A100-80GB", tp=1, model="llama-3-8b", scheme="dynamollm9",
        clock_fractions=(1.0,), window_s=15.0, tolerance=0.3,
    )  # fmt: skip
    plain, none = live_mode_profiles(ModeProfileJob(request=request))
    assert none == ()
    scaled, found = live_mode_profiles(
        ModeProfileJob(
            request=request, rows=plain, mixed=True, groups=tuple(sorted(GROUPS.items()))
        )
    )
    assert {c.group for c in found} == {"long", "short"}
    assert all(c.measured_qps > 0 for c in found)
    before = {r.request_class: r.max_qps for r in plain}
    for cap in found:
        for row in scaled:
            if GROUPS[row.request_class] == cap.group and before[row.request_class] > 0:
                assert abs(row.max_qps - round(before[row.request_class] * cap.derating, 4)) < 1e-9
