"""Unit tests of the classifier's pure pipeline."""

from __future__ import annotations

import pytest

from proto.messages import Plan, PoolPlan, Request, RouteWeight
from services.classifier.pipeline import ClassifierCore, RoutingTable
from services.classifier.predictors import make_predictor
from shared.domain.classes import default_slos, dynamollm_scheme
from shared.errors import RequestRejectedError
from shared.model_context import context_limits


def _plan(weights: dict[str, float]) -> Plan:
    pools = [
        PoolPlan(
            pool_id=p, region="PJM", gpu="A100-80GB", tp=1, instances=1, ttft_ms=100.0, tbt_ms=20.0
        )
        for p in weights
    ]
    routes = {"*": [RouteWeight(pool_id=p, weight=w) for p, w in weights.items()]}
    return Plan(
        epoch=1, issued_at=0.0, valid_until=1.0, scheme="dynamollm9", pools=pools, routes=routes
    )


def _core() -> ClassifierCore:
    scheme = dynamollm_scheme()
    return ClassifierCore(
        scheme=scheme,
        slos=default_slos(scheme),
        predictor=make_predictor("oracle"),
        models=("llama-3-8b",),
        max_context_tokens=8192,
        alpha_llf=1.4,
        default_ttft_ms=250.0,
        default_tbt_ms=50.0,
    )


def _req(**kw: object) -> Request:
    fields: dict[str, object] = {
        "request_id": "r1",
        "model": "llama-3-8b",
        "reply_subject": "x",
        "sent_at": 0.0,
        "max_tokens": 200,
        "prompt_tokens": 300,
    }
    fields.update(kw)
    return Request(**fields)  # type: ignore[arg-type]


def test_classify_computes_class_and_llf_deadline_from_the_pool_profile() -> None:
    """Test that class, Lat = N·TBT + TTFT and deadline = arrival + 1.4·Lat come out right."""
    core = _core()
    core.update_plan(_plan({"a": 1.0}))
    out = core.classify(_req(), arrival_s=10.0, now_wall=0.0)
    assert out.request_class == "MM"
    assert out.lat_s == pytest.approx((200 * 20.0 + 100.0) / 1000.0)
    assert out.deadline_s == pytest.approx(10.0 + 1.4 * out.lat_s)
    assert out.pool_id == "a"


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"model": "gpt-99"}, "unknown_model"),
        ({"prompt_tokens": 8000, "max_tokens": 500}, "too_long"),
        ({"prompt_tokens": None}, "missing_prompt"),
        ({"prompt_tokens": None, "prompt": "hello"}, "no_tokenizer"),
    ],
)
def test_classify_rejects_bad_requests_with_a_code(fields: dict[str, object], code: str) -> None:
    """Test that each kind of unservable request is rejected with its own reason code."""
    core = _core()
    core.update_plan(_plan({"a": 1.0}))
    with pytest.raises(RequestRejectedError) as info:
        core.classify(_req(**fields), arrival_s=0.0, now_wall=0.0)
    assert info.value.code == code


def test_classify_without_a_plan_is_rejected() -> None:
    """Test that no plan means a clear no_plan rejection rather than a guess."""
    with pytest.raises(RequestRejectedError, match="no_plan"):
        _core().classify(_req(), arrival_s=0.0, now_wall=0.0)


def test_routing_is_deterministic_per_id_and_follows_weights() -> None:
    """Test that a redelivered request lands in the same pool and weights shape the split."""
    table = RoutingTable.from_plan(_plan({"a": 3.0, "b": 1.0}))
    picks = [table.choose("SS", f"req-{i}").pool_id for i in range(4000)]
    assert picks == [table.choose("SS", f"req-{i}").pool_id for i in range(4000)]
    share_a = picks.count("a") / len(picks)
    assert 0.70 < share_a < 0.80


def test_routing_drops_zero_weight_and_unknown_pools() -> None:
    """Test that a route to a missing pool or with zero weight is never chosen."""
    plan = _plan({"a": 0.0, "b": 1.0})
    plan = Plan(
        epoch=1,
        issued_at=0.0,
        valid_until=1.0,
        scheme="dynamollm9",
        pools=plan.pools,
        routes={"*": [*plan.routes["*"], RouteWeight(pool_id="ghost", weight=5.0)]},
    )
    table = RoutingTable.from_plan(plan)
    assert {table.choose("LL", f"r{i}").pool_id for i in range(200)} == {"b"}


def _two_model_plan() -> Plan:
    pools = [
        PoolPlan(pool_id=p, region="PJM", gpu="A100-80GB", tp=1, instances=1, model=m)
        for p, m in (("p8b", "llama-3-8b"), ("p13b", "llama-2-13b"))
    ]
    routes = {"*": [RouteWeight(pool_id=p.pool_id, weight=1.0) for p in pools]}
    return Plan(
        epoch=1, issued_at=0.0, valid_until=1.0, scheme="dynamollm9", pools=pools, routes=routes
    )


def test_a_request_goes_only_to_pools_of_its_model() -> None:
    """Test that with pools of two models every request of a model lands in its pool."""
    core = ClassifierCore(
        scheme=dynamollm_scheme(),
        slos={},
        predictor=make_predictor("oracle"),
        models=("llama-3-8b", "llama-2-13b", "llama-2-70b"),
        max_context_tokens=8192,
        alpha_llf=1.4,
        default_ttft_ms=250.0,
        default_tbt_ms=50.0,
    )
    core.update_plan(_two_model_plan())
    for model, pool in (("llama-3-8b", "p8b"), ("llama-2-13b", "p13b")):
        requests = [_req(request_id=f"r{i}", model=model) for i in range(100)]
        pools = {core.classify(r, arrival_s=0.0, now_wall=0.0).pool_id for r in requests}
        assert pools == {pool}
    with pytest.raises(RequestRejectedError) as err:
        core.classify(_req(model="llama-2-70b"), arrival_s=0.0, now_wall=0.0)
    assert err.value.code == "model_not_found"


def test_a_pool_of_no_model_takes_any_model() -> None:
    """Test that a plan whose pools name no model (an older planner) still routes."""
    table = RoutingTable.from_plan(_plan({"a": 1.0}))
    assert table.serves("llama-2-13b")
    assert table.choose("SS", "r1", "llama-2-13b").pool_id == "a"


def test_a_model_is_held_to_its_own_shorter_context() -> None:
    """Test that a request sized for the deployment's 8,192 tokens is refused ``too_long``
    for Llama-2-13B (4,096) and served for Llama-3-8B; an unknown name keeps the limit."""
    limits = context_limits(("llama-3-8b", "llama-2-13b", "my-finetune"), 8192)
    assert limits == {"llama-3-8b": 8192, "llama-2-13b": 4096, "my-finetune": 8192}
    core = ClassifierCore(
        scheme=dynamollm_scheme(),
        slos={},
        predictor=make_predictor("oracle"),
        models=tuple(limits),
        max_context_tokens=8192,
        alpha_llf=1.4,
        default_ttft_ms=250.0,
        default_tbt_ms=50.0,
        model_contexts=limits,
    )
    core.update_plan(_plan({"a": 1.0}))
    sized = {"prompt_tokens": 4000, "max_tokens": 200}
    for model in ("llama-3-8b", "my-finetune"):
        served = core.classify(_req(model=model, **sized), arrival_s=0.0, now_wall=0.0)
        assert served.input_tokens == 4000
    with pytest.raises(RequestRejectedError) as err:
        core.classify(_req(model="llama-2-13b", **sized), arrival_s=0.0, now_wall=0.0)
    assert err.value.code == "too_long"
    assert "4096" in err.value.reason
