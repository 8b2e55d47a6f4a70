"""Predictive clock control (throttLL'eM §3.3): binary search, deadlines, lost requests."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from numpy.typing import NDArray

from services.dvfs.controller import Observation, RequestState
from services.dvfs.perf_model import IpsModel, PrefillModel, ProfileData, evaluate_ips_model
from services.dvfs.predictive import (
    PredictiveConfig,
    PredictiveController,
    lowest_feasible_clock,
    tbt_bound,
)
from shared.domain.projection import project_segments
from shared.engine import EngineConfig

A100 = tuple(210.0 + 15.0 * i for i in range(81))
FloatArray = NDArray[np.float64]


class LinearIps:
    """IPS that rises with clock everywhere (80 it/s at 1410 MHz) and falls with batch."""

    def predict_ips(
        self, batch: FloatArray, kv_blocks: FloatArray, clock_mhz: FloatArray
    ) -> FloatArray:
        """Return 80 it/s × (0.3 + 0.7 f/1410), less with batch and KV."""
        clock_factor = 0.3 + 0.7 * clock_mhz / 1410.0
        return np.asarray(80.0 * clock_factor / (1.0 + batch / 256.0 + kv_blocks / 1e5))


def _observe(requests: list[RequestState], now: float = 0.0, **extra: float) -> Observation:
    return Observation(
        now_s=now,
        clock_mhz=1410.0,
        supported_clocks_mhz=A100,
        requests=tuple(requests),
        **extra,  # type: ignore[arg-type]
    )


def _batch(n: int, remaining: int, deadline: float, prompt: int = 20) -> list[RequestState]:
    return [
        RequestState(
            request_id=f"q{i}",
            prompt_tokens=prompt,
            generated_tokens=0,
            predicted_remaining_tokens=remaining,
            deadline_s=deadline,
        )
        for i in range(n)
    ]


def test_light_load_with_slack_gets_a_clock_below_max() -> None:
    """Test that a small batch with loose deadlines runs well below 1410 MHz."""
    controller = PredictiveController(LinearIps())
    assert controller.decide(_observe(_batch(4, 100, deadline=30.0))) < 1000.0


def test_tight_deadlines_force_the_maximum_clock() -> None:
    """Test that deadlines only met at full speed give the highest clock."""
    # 100 tokens at 78.77 it/s take 1.2695 s at 1410 MHz and 1.279 s one step lower (1395).
    controller = PredictiveController(LinearIps())
    assert controller.decide(_observe(_batch(4, 100, deadline=1.272))) == 1410.0
    assert controller.lost_requests == 0


def test_binary_search_agrees_with_a_linear_scan() -> None:
    """Test that the search returns the lowest clock a linear scan finds feasible."""
    model = LinearIps()
    requests = _batch(8, 300, deadline=7.0) + _batch(3, 40, deadline=0.9, prompt=500)
    projection = project_segments(requests, block_size=16)
    slack = np.array([r.deadline_s for r in requests])
    chosen, lost = lowest_feasible_clock(model, projection, slack, A100, tbt_slo_s=0.15)
    for clock in A100:
        ips = model.predict_ips(
            projection.batch, projection.kv_blocks, np.full(projection.batch.size, clock)
        )
        elapsed = np.cumsum(np.repeat(1.0 / ips, projection.iterations))
        finish = elapsed[projection.finish_iteration]
        mean_tbt = float(np.dot(1.0 / ips, projection.iterations)) / projection.horizon
        if mean_tbt <= 0.15 and bool((finish <= slack).all()):
            assert chosen == clock
            break
    assert lost == 0


def test_a_lost_request_pins_max_clock_unless_ignored() -> None:
    """Test that a hopeless deadline gives max clock, or is left out with "ignore"."""
    requests = _batch(4, 100, deadline=30.0) + _batch(1, 500, deadline=0.5)
    pinned = PredictiveController(LinearIps())
    assert pinned.decide(_observe(requests)) == 1410.0
    assert pinned.lost_requests == 1
    ignoring = PredictiveController(LinearIps(), PredictiveConfig(lost_policy="ignore"))
    assert ignoring.decide(_observe(requests)) < 1000.0


def test_idle_instance_gets_the_lowest_allowed_clock() -> None:
    """Test that with nothing to serve the clock drops to the search floor."""
    assert PredictiveController(LinearIps()).decide(_observe([])) == 210.0
    floored = PredictiveController(LinearIps(), PredictiveConfig(min_clock_mhz=300.0))
    assert floored.decide(_observe([])) == 300.0


def test_prefill_budget_raises_the_clock_under_prompt_load() -> None:
    """Test that arriving prompts taking GPU time push the chosen clock up."""
    prefill = PrefillModel(np.array([210.0, 1410.0]), np.array([6.7e-4, 1.0e-4]))
    requests = _batch(8, 200, deadline=6.0)
    plain = PredictiveController(LinearIps()).decide(_observe(requests))
    loaded = PredictiveController(LinearIps(), prefill=prefill).decide(
        _observe(requests, prompt_tokens_per_s=3000.0)
    )
    assert loaded > plain


def test_learned_model_is_monotone_in_clock(ips_model: IpsModel) -> None:
    """Test that the fitted IPS never falls when only the clock rises (binary-search premise)."""
    rng = np.random.default_rng(1)
    for batch, kv in zip(rng.integers(1, 256, 20), rng.integers(10, 28000, 20), strict=True):
        ips = ips_model.predict_ips(np.full(81, batch), np.full(81, kv), np.array(A100))
        assert np.all(np.diff(ips) >= -1e-9)


def test_flattened_forest_reproduces_sklearn_predictions(ips_model: IpsModel) -> None:
    """Test that the fast tree walk gives scikit-learn's predictions for random rows."""
    rows = np.random.default_rng(2).uniform([1, 0, 210], [256, 28000, 1410], size=(500, 3))
    fast = ips_model.predict_ips(rows[:, 0], rows[:, 1], rows[:, 2])
    reference = np.maximum(ips_model.regressor.predict(rows), 1e-3)
    assert np.allclose(fast, reference)


def test_learned_model_lowers_the_clock_at_light_load_and_not_when_tight(
    ips_model: IpsModel, engine_config: EngineConfig
) -> None:
    """Test that with the engine-trained model light load runs slow and tight load fast."""
    controller = PredictiveController(ips_model, PredictiveConfig(tbt_slo_s=0.15))
    requests = _batch(64, 150, deadline=7.0)
    relaxed = controller.decide(_observe(requests))
    projection = project_segments(requests, block_size=engine_config.block_size)
    ips = ips_model.predict_ips(
        projection.batch, projection.kv_blocks, np.full(projection.batch.size, 1410.0)
    )
    at_max_s = float(np.dot(1.0 / ips, projection.iterations))
    tight = controller.decide(_observe(_batch(64, 150, deadline=at_max_s * 1.01)))
    hopeless = controller.decide(_observe(_batch(64, 150, deadline=at_max_s * 0.5)))
    assert relaxed <= 600.0
    assert tight >= 1200.0
    assert hopeless == 1410.0


def _arriving(start: int, n: int, now: float, slo: float = 20.0) -> list[RequestState]:
    return [
        RequestState(
            request_id=f"a{start + i}",
            prompt_tokens=1000,
            generated_tokens=0,
            predicted_remaining_tokens=300,
            deadline_s=now + slo,
            running=False,
        )
        for i in range(n)
    ]


def test_an_observed_arrival_stream_raises_the_clock() -> None:
    """Test that requests seen arriving each period are projected and cost clock."""
    paper = PredictiveController(LinearIps())
    aware = PredictiveController(LinearIps(), PredictiveConfig(arrival_window_s=30.0))
    requests = _batch(8, 400, deadline=12.0)
    chosen: dict[str, float] = {}
    for t in range(1, 6):  # 20 new requests per second (new ids each period)
        requests = [*requests, *_arriving(20 * t, 20, float(t))]
        observation = _observe(requests, now=float(t))
        chosen = {"paper": paper.decide(observation), "aware": aware.decide(observation)}
    assert chosen["aware"] > chosen["paper"]


def test_arrival_window_forgets_old_arrivals() -> None:
    """Test that a burst older than the window no longer counts as a stream."""
    aware = PredictiveController(LinearIps(), PredictiveConfig(arrival_window_s=5.0))
    paper = PredictiveController(LinearIps())
    burst = _arriving(0, 50, 0.0, slo=100.0)
    aware.decide(_observe(burst, now=0.0))
    later = _observe(burst, now=10.0)  # same requests, nothing new for 10 s
    assert aware.decide(later) == paper.decide(later)


def test_requests_present_at_the_first_observation_are_not_arrivals() -> None:
    """Test that a controller started on a busy instance takes its batch as the baseline.

    Without the baseline the 48 requests already there count as one period's arrivals
    (48 per second, then 48 over the time since), and the projected stream over-clocks
    until they leave the 30 s window.
    """
    aware = PredictiveController(LinearIps(), PredictiveConfig(arrival_window_s=30.0))
    paper = PredictiveController(LinearIps())
    busy = [*_batch(8, 400, deadline=115.0), *_arriving(0, 40, 100.0)]
    for t in (100.0, 101.0, 105.0):  # started at t = 100 s; nothing new arrives after
        observation = _observe(busy, now=t)
        assert aware.decide(observation) == paper.decide(observation)
    newcomers = [*busy, *_arriving(40, 20, 106.0)]
    observation = _observe(newcomers, now=106.0)  # the first real arrivals still count
    assert aware.decide(observation) > paper.decide(observation)


def test_model_margin_raises_the_clock() -> None:
    """Test that stretching predicted iteration times by a margin costs clock."""
    requests = _batch(8, 300, deadline=6.0)
    plain = PredictiveController(LinearIps()).decide(_observe(requests))
    margin = PredictiveController(LinearIps(), PredictiveConfig(time_margin=0.2))
    assert margin.decide(_observe(requests)) > plain


def test_time_error_quantile_measures_under_prediction() -> None:
    """Test that a model predicting 25 % too many iterations/s under-predicts time by 25 %."""
    true_ips = np.linspace(20.0, 80.0, 200)
    data = ProfileData(np.ones(200), np.ones(200), np.full(200, 1410.0), true_ips)

    class Fast:
        def predict_ips(self, batch: FloatArray, kv: FloatArray, clock: FloatArray) -> FloatArray:
            return true_ips * 1.25

    assert evaluate_ips_model(Fast(), data).time_error_p95 == pytest.approx(0.25)


def test_admission_refuses_a_request_that_would_break_another_deadline() -> None:
    """Test throttLL'eM §3.2: refuse when an admitted request would miss, admit a lost one."""
    controller = PredictiveController(LinearIps())
    # 100 tokens take 1.2695 s at 1410 MHz with 4 in the batch: a 1.272 s deadline holds.
    tight = _observe(_batch(4, 100, deadline=1.272), kv_blocks_total=10**6)
    heavy = RequestState(
        request_id="big",
        prompt_tokens=20_000,
        generated_tokens=0,
        predicted_remaining_tokens=100,
        deadline_s=60.0,
    )
    assert not controller.admits(tight, heavy)
    loose = _observe(_batch(4, 100, deadline=30.0), kv_blocks_total=10**6)
    hopeless = RequestState(
        request_id="late",
        prompt_tokens=20,
        generated_tokens=0,
        predicted_remaining_tokens=500,
        deadline_s=0.5,
    )
    assert controller.admits(loose, hopeless)  # misses only its own deadline: admitted, lost
    assert controller.admits(_observe([]), heavy)
    assert controller.admits(loose, heavy)  # with slack the same request fits
    full = _observe(_batch(4, 100, deadline=30.0), kv_blocks_total=100)
    assert not controller.admits(full, heavy)  # 20,000 prompt tokens overflow the KV cache


class SlowIps:
    """LinearIps at a tenth of its speed: 8 it/s at 1410 MHz, so TBT bounds bind."""

    def predict_ips(
        self, batch: FloatArray, kv_blocks: FloatArray, clock_mhz: FloatArray
    ) -> FloatArray:
        """Return a tenth of :class:`LinearIps`."""
        return LinearIps().predict_ips(batch, kv_blocks, clock_mhz) / 10.0


def _mean_tbt(requests: list[RequestState], clock: float) -> float:
    projection = project_segments(requests, block_size=16)
    ips = SlowIps().predict_ips(
        projection.batch, projection.kv_blocks, np.full(projection.batch.size, clock)
    )
    return float(np.dot(1.0 / ips, projection.iterations)) / projection.horizon


def _with_slo(requests: list[RequestState], tbt_slo_s: float | None) -> list[RequestState]:
    return [dataclasses.replace(r, tbt_slo_s=tbt_slo_s) for r in requests]


def test_the_batch_is_held_to_the_strictest_class_tbt_slo_it_holds() -> None:
    """Test that one 150 ms request raises the clock a 200 ms default would allow."""
    loose = _batch(4, 100, deadline=1e4)
    default_clock = PredictiveController(SlowIps()).decide(_observe(loose))
    strict = _with_slo(loose[:1], 0.15) + loose[1:]
    strict_clock = PredictiveController(SlowIps()).decide(_observe(strict))
    assert strict_clock > default_clock
    below = A100[A100.index(strict_clock) - 1]
    assert _mean_tbt(strict, strict_clock) <= 0.15 < _mean_tbt(strict, below)
    below_default = A100[A100.index(default_clock) - 1]
    assert _mean_tbt(loose, default_clock) <= 0.2 < _mean_tbt(loose, below_default)
    # A looser class SLO than the default is the class's to have.
    relaxed_clock = PredictiveController(SlowIps()).decide(_observe(_with_slo(loose, 0.3)))
    assert relaxed_clock < default_clock


def test_tbt_bound_takes_the_smallest_slo_and_falls_back_to_the_default() -> None:
    """Test the bound: min over requests, a request without a class SLO counts as default."""
    batch = _batch(2, 10, deadline=5.0)
    assert tbt_bound([], 0.2) == 0.2
    assert tbt_bound(batch, 0.2) == 0.2
    assert tbt_bound(_with_slo(batch[:1], 0.1) + batch[1:], 0.2) == 0.1
    assert tbt_bound(_with_slo(batch, 0.3), 0.2) == 0.3


def test_admission_refuses_a_candidate_whose_own_tbt_slo_the_batch_would_miss() -> None:
    """Test that a 100 ms candidate is refused where the 200 ms default would admit it."""
    controller = PredictiveController(SlowIps())
    present = _observe(_batch(4, 100, deadline=1e4), kv_blocks_total=10**6)
    candidate = _batch(1, 100, deadline=1e4)[0]
    assert controller.admits(present, candidate)
    (strict,) = _with_slo([candidate], 0.1)
    assert not controller.admits(present, strict)
