"""The live planner plans each model's pools for that model's demand alone."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import cast

from nats.aio.msg import Msg
from opentelemetry import trace

from proto.codec import encode
from proto.messages import Completion, CompletionBatch, Plan, PoolPlan, RouteWeight
from services.classifier.pipeline import RoutingTable
from services.planner.live_inputs import LivePool
from services.planner.live_service import LivePlanner
from services.planner.plan_wire import merged_plan
from shared.clock import ModelClock
from shared.config import Settings
from shared.domain.classes import dynamollm_scheme
from shared.lifecycle import ServiceContext
from tests.unit.planner.helpers import config

POOLS = {
    "a": LivePool(
        pool_id="a", region="PJM", gpu="A100-80GB", tp=1, model="llama-3-8b",
        workers=("w0", "w1", "w2", "w3"),
    ),
    "b": LivePool(
        pool_id="b", region="PJM", gpu="A100-80GB", tp=1, model="llama-2-13b",
        workers=("w4", "w5", "w6", "w7"),
    ),
}  # fmt: skip


def _planner() -> LivePlanner:
    # The CSV's rows as they are (no mixed-class measurement, no engine idle power): the
    # test is about demand per model, not about the capacity model.
    settings = Settings(
        planner={"mode": "milp", "objective": "energy", "alpha": 1.0, "primary_slack": 0.0,
                 "mixed_capacity": False, "whole_instances": False}
    )  # fmt: skip
    ctx = SimpleNamespace(
        settings=settings,
        clock=ModelClock(1.0, 0.0, 0.0),  # model time is wall time
        tracer=trace.get_tracer("test"),
    )
    planner = LivePlanner(cast(ServiceContext, ctx))
    # One instance serves 1 req/s of any class (at its maximum clock, 300 W).
    planner._csv = tuple(
        config(partition="dynamollm9", cls=c, gpu="A100", tp=1, qps=1.0, power=300.0)
        for c in dynamollm_scheme().classes
    )

    async def inventory() -> dict[str, LivePool]:
        return dict(POOLS)

    planner._inventory = inventory  # type: ignore[method-assign]
    return planner


async def _observe(planner: LivePlanner, model: str, rate_rps: float, span_s: float) -> None:
    """Completions of ``model`` at ``rate_rps`` over the last ``span_s`` seconds."""
    now = time.time()
    count = int(rate_rps * span_s)
    done = [
        Completion(
            request_id=f"{model}-{i}", worker_id="w", pool_id="p", region="PJM",
            request_class="SS", input_tokens=100, output_tokens=100,
            sent_at=now - span_s + i / rate_rps, accepted_at=0.0, first_token_at=0.0,
            finished_at=now - span_s + i / rate_rps + 1.0, energy_j=0.0, model=model,
        )
        for i in range(count)
    ]  # fmt: skip
    msg = SimpleNamespace(data=encode(CompletionBatch(completions=done)))
    await planner.on_done(cast(Msg, msg))


async def test_each_models_pools_are_sized_for_its_own_demand() -> None:
    """Test that a model without demand bootstraps while another is planned, and that once
    both have demand each model's pool gets the instances its own demand needs."""
    planner = _planner()
    await _observe(planner, "llama-3-8b", rate_rps=2.5, span_s=900.0)
    await planner.plan_epoch(1)
    plan = planner.plan
    assert plan is not None
    bootstrapping = [planner.bootstrapping]  # llama-2-13b has no demand yet
    by_pool = {p.pool_id: p for p in plan.pools}
    assert (by_pool["a"].model, by_pool["b"].model) == ("llama-3-8b", "llama-2-13b")
    assert by_pool["a"].instances == 3  # 2.5 req/s at 1 req/s per instance
    assert by_pool["b"].instances == 4  # bootstrap: every worker serves

    await _observe(planner, "llama-2-13b", rate_rps=0.5, span_s=900.0)
    await planner.plan_epoch(2)
    plan = planner.plan
    assert plan is not None
    bootstrapping.append(planner.bootstrapping)
    assert bootstrapping == [True, False]
    instances = {p.pool_id: p.instances for p in plan.pools}
    assert instances == {"a": 3, "b": 1}
    # Routes mix both models' pools; the classifier picks among a request's model's only.
    table = RoutingTable.from_plan(plan)
    for model, pool in (("llama-3-8b", "a"), ("llama-2-13b", "b")):
        assert {table.choose("SS", f"r{i}", model).pool_id for i in range(50)} == {pool}
    assert not table.serves("llama-2-70b")


def test_a_merged_plan_keeps_only_the_default_route_of_another_scheme() -> None:
    """Test that a model planned under another class scheme keeps only its ``*`` route."""

    def plan(pool: str, scheme: str) -> Plan:
        return Plan(
            epoch=1, issued_at=0.0, valid_until=1.0, scheme=scheme,
            pools=[PoolPlan(pool_id=pool, region="PJM", gpu="A100", tp=1, instances=1)],
            routes={c: [RouteWeight(pool_id=pool, weight=1.0)] for c in ("*", "SS")},
        )  # fmt: skip

    merged = merged_plan([plan("a", "dynamollm9"), plan("b", "other")])
    assert merged.scheme == "dynamollm9"
    assert [w.pool_id for w in merged.routes["*"]] == ["a", "b"]
    assert [w.pool_id for w in merged.routes["SS"]] == ["a"]
    assert [p.pool_id for p in merged.pools] == ["a", "b"]
