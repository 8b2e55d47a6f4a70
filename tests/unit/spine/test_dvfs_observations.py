"""Unit tests of the live dvfs agent's observations and controller choice."""

from __future__ import annotations

from typing import cast

import numpy as np
import pytest

from proto.messages import Completion, WorkerStats
from services.dvfs.miad import MiadController
from services.dvfs.observations import LatencyCollector, observation_for
from services.dvfs.perf_model import IpsModel, ModelAccuracy, PredictiveModels, PrefillModel
from services.dvfs.predictive import DEFAULT_ARRIVAL_WINDOW_S, PredictiveController
from services.dvfs.service import make_controller
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


def test_miad_raises_the_clock_when_a_request_breaks_table7() -> None:
    """Test that a slow TTFT in the window doubles the clock (FREESH Eq. 5a) in the live agent."""
    controller = make_controller("miad", None, 1.0)
    assert isinstance(controller, MiadController)
    collector = LatencyCollector(speedup=1.0)
    collector.add(_done("w", ttft_s=2.0, e2e_s=3.0, tokens=5))
    target = controller.decide(observation_for(_stats(600.0), collector.take("w"), now_s=0.0))
    assert target == pytest.approx(1200.0, abs=15.0)
    quiet = controller.decide(observation_for(_stats(target), {}, now_s=1.0))
    assert quiet == pytest.approx(target - 100.0, abs=15.0)


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
