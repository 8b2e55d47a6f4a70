"""The replay report judges E2E against Lat of the true lengths, as the simulator does."""

from __future__ import annotations

import math

from loadgen.replay import ClientRecord, ReplayResult
from loadgen.report import judged_lat_s, replay_records
from loadgen.traces import TraceRequest
from proto.messages import Completion


def _completion(
    *, produced: int, predicted: int, profile: bool, gpu: str = "", tp: int = 0
) -> Completion:
    ttft_ms, tbt_ms = 100.0, 20.0
    return Completion(
        request_id="r1", worker_id="w", pool_id="p", region="PJM", request_class="SM",
        input_tokens=100, output_tokens=produced, sent_at=0.0, accepted_at=0.01,
        first_token_at=0.1, finished_at=1.0, energy_j=1.0,
        predicted_output_tokens=predicted, lat_s=(predicted * tbt_ms + ttft_ms) / 1000.0,
        profile_ttft_ms=ttft_ms if profile else 0.0, profile_tbt_ms=tbt_ms if profile else 0.0,
        model="llama-3-8b", gpu=gpu, tp=tp,
    )  # fmt: skip


def test_lat_is_the_true_lengths_on_the_pools_profile() -> None:
    """Test that an underpredicted request (10 tokens guessed, 50 produced) is judged against
    50 × TBT + TTFT, not the guess's tighter bound, and that a completion from a sender that
    predates the profile fields keeps the stack's own Lat."""
    done = _completion(produced=50, predicted=10, profile=True)
    assert math.isclose(done.lat_s, 0.3)
    assert math.isclose(judged_lat_s(done), 1.1)
    old = _completion(produced=50, predicted=10, profile=False)
    assert math.isclose(judged_lat_s(old), 0.3)


def test_the_report_records_carry_the_judged_bound() -> None:
    """Test that the per-request records the report summarises carry the true-length Lat."""
    record = ClientRecord(
        request_id="r1",
        trace=TraceRequest(t_s=0.0, prompt_tokens=100, output_tokens=50),
        sent_at=0.0,
        token_times={0: 0.1, 49: 1.0},
        completion=_completion(produced=50, predicted=10, profile=True),
    )
    result = ReplayResult(
        records=[record], workers={}, started_at=0.0, finished_at=1.0, speedup=1.0
    )
    [judged] = replay_records(result)
    assert math.isclose(judged.latency_budget_s, 1.1)


def test_a_completion_naming_its_configuration_is_judged_alone_on_it() -> None:
    """Test that a completion carrying its worker's GPU and TP is judged against the
    request's true lengths alone on an idle instance of that configuration (the simulator's
    yardstick), and that a configuration the engine does not know falls back to the
    profile."""
    from shared.engine.api import EngineConfig
    from shared.engine.unloaded import unloaded_latency_s

    done = _completion(produced=50, predicted=10, profile=True, gpu="A100-80GB", tp=1)
    alone = unloaded_latency_s(EngineConfig(gpu="A100-80GB", model="llama-3-8b"), 100, 50)
    assert math.isclose(judged_lat_s(done), alone)
    assert not math.isclose(alone, 1.1)
    unknown = _completion(produced=50, predicted=10, profile=True, gpu="TPU-v9", tp=1)
    assert math.isclose(judged_lat_s(unknown), 1.1)
