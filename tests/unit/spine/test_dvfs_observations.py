"""Unit tests of the live dvfs agent's observations and controller choice."""

from __future__ import annotations

from typing import cast

import numpy as np
import pytest

from proto.messages import Completion, Plan, PoolPlan, RouteWeight, WorkerStats
from services.dvfs.miad_live import LiveSloMiad
from services.dvfs.observations import LatencyCollector, observation_for
from services.dvfs.perf_model import IpsModel, ModelAccuracy, PredictiveModels, PrefillModel
from services.dvfs.predictive import DEFAULT_ARRIVAL_WINDOW_S, PredictiveController
from services.dvfs.service import make_controller
from services.dvfs.slo_miad import served_floor_mhz, slo_clock_floor_mhz
from shared.config import DvfsSettings, PlannerSettings
from shared.domain.classes import default_slos, scheme_by_name
from shared.domain.plan import pool_clock_caps
from shared.engine import EngineConfig
from tests.factories import worker_stats


def _done(worker: str, ttft_s: float, e2e_s: float, tokens: int) -> Completion:
    return Completion(
        request_id="r", worker_id=worker, pool_id="p", region="PJM", request_class="SS",
        input_tokens=10, output_tokens=tokens, sent_at=100.0, accepted_at=100.0,
        first_token_at=100.0 + ttft_s, finished_at=100.0 + e2e_s, energy_j=1.0,
    )  # fmt: skip


def _stats(clock: float) -> WorkerStats:
    return worker_stats(running=1, free_slots=7, kv_blocks_used=10, clock_mhz=clock, power_w=100.0)


def test_latencies_are_scaled_to_model_time_and_taken_once() -> None:
    """Test that wall latencies × speed-up become model seconds and a window is consumed."""
    collector = LatencyCollector(speedup=10.0)
    collector.add(_done("w", ttft_s=0.01, e2e_s=0.11, tokens=11))
    window = collector.take("w")["SS"]
    assert window.ttft_s == pytest.approx((0.1,))
    assert window.e2e_s == pytest.approx((1.1,))
    assert window.tbt_s == pytest.approx((0.1,))
    assert collector.take("w") == {}


def _slo_miad(**dvfs: object) -> LiveSloMiad:
    scheme = scheme_by_name("dynamollm9")
    return LiveSloMiad(DvfsSettings(**dvfs), PlannerSettings(), scheme, default_slos(scheme))


def test_live_miad_doubles_on_a_slow_request_and_never_falls_below_the_slo_floor() -> None:
    """Test the default live MIAD: a TTFT over half its SLO doubles the clock (Eq. 5a with
    the guard), quiet periods lower it by 100 MHz, but never below the SLO floor the
    simulator's headline uses for the same engine (a pool sent bounded prompts only)."""
    miad = _slo_miad()
    miad.on_plan(_pool_plan(["SS", "MS"]))
    stats = _stats(600.0)
    controller = miad.controller(stats)
    scheme = scheme_by_name("dynamollm9")
    floor = slo_clock_floor_mhz(
        EngineConfig(gpu="A100-80GB", model="llama-3-8b", tp=1, max_num_seqs=8),
        scheme,
        default_slos(scheme),
        0.5,
    )
    assert controller.config.min_clock_mhz == floor
    collector = LatencyCollector(speedup=1.0)
    slo = default_slos(scheme)["SS"]
    # Over half the TTFT SLO but within it: the guard band counts it as congestion.
    collector.add(_done("w", ttft_s=0.6 * slo.ttft_ms / 1000.0, e2e_s=3.0, tokens=5))
    target = controller.decide(observation_for(stats, collector.take("w"), now_s=0.0))
    assert target == pytest.approx(1200.0, abs=15.0)
    clock = target
    for period in range(1, 30):
        clock = miad.target(_stats(clock), controller.decide(
            observation_for(_stats(clock), {}, now_s=float(period))
        ), None)  # fmt: skip
    assert clock == pytest.approx(floor, abs=15.0)
    assert floor > 300.0  # FREESH's floor would let it fall further


def test_live_miad_cap_of_the_plan_stops_at_the_slo_floor() -> None:
    """Test that a plan's clock below the SLO floor does not take MIAD under the floor,
    and that without the floor the cap applies as planned."""
    plan = Plan(
        epoch=0, issued_at=0.0, valid_until=1.0, scheme="dynamollm9",
        pools=[PoolPlan(pool_id="p", region="PJM", gpu="A100-80GB", tp=1, instances=1,
                        clock_mhz=210.0, classes=["SS", "MS"])],
        routes={"*": [RouteWeight(pool_id="p", weight=1.0)]}, objective="carbon",
    )  # fmt: skip
    cap = pool_clock_caps(plan)["p"]
    floored = _slo_miad()
    floored.on_plan(plan)
    floor = floored.controller(_stats(1410.0)).config.min_clock_mhz
    assert floored.target(_stats(1410.0), 1410.0, cap) == floor
    unfloored = _slo_miad(miad_slo_floor=False)
    unfloored.on_plan(plan)
    assert unfloored.target(_stats(1410.0), 1410.0, cap) == pytest.approx(300.0)


def _pool_plan(classes: list[str]) -> Plan:
    return Plan(
        epoch=0, issued_at=0.0, valid_until=1.0, scheme="dynamollm9",
        pools=[PoolPlan(pool_id="p", region="PJM", gpu="A100-80GB", tp=1, instances=1,
                        classes=classes)],
        routes={"*": [RouteWeight(pool_id="p", weight=1.0)]}, objective="carbon",
    )  # fmt: skip


def _long_done(prompt: int) -> Completion:
    return Completion(
        request_id="r", worker_id="w", pool_id="p", region="PJM", request_class="LS",
        input_tokens=prompt, output_tokens=8, sent_at=0.0, accepted_at=0.0,
        first_token_at=0.1, finished_at=0.2, energy_j=1.0,
    )  # fmt: skip


def test_live_miad_holds_a_long_prompt_pool_at_the_maximum_clock_until_it_served_enough() -> None:
    """Test that a pool sent the open-ended input bucket floors at the maximum clock while
    the node has not served enough requests to know its p99 long prompt, then at that
    prompt's SLO floor; a pool sent bounded classes only never gets that floor."""
    scheme = scheme_by_name("dynamollm9")
    config = EngineConfig(gpu="A100-80GB", model="llama-3-8b", tp=1, max_num_seqs=8)
    miad = _slo_miad()
    miad.on_plan(_pool_plan(["LS", "LM"]))
    stats = _stats(600.0)
    top = 1410.0  # the A100's maximum clock
    assert miad.target(stats, 600.0, None) == pytest.approx(top)
    for _ in range(PlannerSettings().observed_min_requests):
        miad.on_done(_long_done(2048))
    served = slo_clock_floor_mhz(config, scheme, default_slos(scheme), 0.5, open_prompt=2048)
    assert served < top
    assert miad.target(stats, 600.0, None) == pytest.approx(max(600.0, served))
    bounded = _slo_miad()
    bounded.on_plan(_pool_plan(["SS", "MS"]))
    assert bounded.target(stats, 600.0, None) < top


def test_the_served_floor_is_the_maximum_before_the_sample_is_trusted_then_the_p99s() -> None:
    """Test the shared served floor: none for a pool not sent the open bucket, the maximum
    clock (or the agent's configured maximum) before the served sample is trusted, the
    p99's SLO floor once known, and none when a trusted sample holds too few long prompts."""
    scheme = scheme_by_name("dynamollm9")
    slos = default_slos(scheme)
    config = EngineConfig(gpu="H100-80GB", model="llama-3-70b", tp=8, max_num_seqs=64)
    args = (config, scheme, slos, 0.5)

    def cold(serves_open: bool, max_clock_mhz: float | None = None) -> float:
        return served_floor_mhz(
            *args, serves_open=serves_open, sample_trusted=False, open_prompt=None,
            max_clock_mhz=max_clock_mhz,
        )  # fmt: skip

    assert cold(serves_open=False) == 0.0
    assert cold(serves_open=True) == pytest.approx(1980.0)
    assert cold(serves_open=True, max_clock_mhz=1500.0) == pytest.approx(1500.0)
    known = served_floor_mhz(*args, serves_open=True, sample_trusted=True, open_prompt=2048)
    assert known == slo_clock_floor_mhz(*args, open_prompt=2048) < 1980.0
    rare = served_floor_mhz(*args, serves_open=True, sample_trusted=True, open_prompt=None)
    assert rare == 0.0


def test_miad_is_built_per_worker_not_by_make_controller() -> None:
    """Test that the agent-wide factory refuses MIAD (it needs the worker's engine)."""
    with pytest.raises(ValueError, match="per worker"):
        make_controller("miad", None, 1.0)


def test_unknown_dvfs_modes_fail_at_start() -> None:
    """Test that a misspelt mode is refused rather than silently ignored."""
    with pytest.raises(ValueError, match="not available"):
        make_controller("turbo", None, 1.0)


def test_predictive_mode_needs_fitted_models_and_uses_their_margin() -> None:
    """Test that the live predictive controller is the bench's, with the model's margin."""
    with pytest.raises(ValueError, match="fitted models"):
        make_controller("predictive", None, 1.0)
    accuracy = ModelAccuracy(r2=0.99, mape_pct=7.0, mae_ips=1.7, test_rows=10, time_error_p95=0.11)
    models = PredictiveModels(
        ips=cast(IpsModel, object()),
        prefill=PrefillModel(np.array([210.0, 1410.0]), np.array([6e-4, 1e-4])),
        held_out=accuracy,
    )
    controller = make_controller("predictive", None, 1.0, models)
    assert isinstance(controller, PredictiveController)
    assert controller.config.time_margin == pytest.approx(0.11)
    assert controller.config.arrival_window_s == DEFAULT_ARRIVAL_WINDOW_S
