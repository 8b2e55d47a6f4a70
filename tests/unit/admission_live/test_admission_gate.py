"""The worker's admission gate: engine-priced projection, refusals, closing and reopening."""

from __future__ import annotations

import time

import numpy as np
import pytest

from proto.messages import ClassifiedRequest
from services.worker.admission_gate import (
    AdmissionGate,
    EngineLimits,
    decode_iteration_time,
    limits_of,
)
from services.worker.instant_backend import InstantBackend
from services.worker.sim_backend import SimBackend
from shared.engine import EngineConfig, SimulatedEngine, create_engine
from tests.factories import classified_request


def _request(
    rid: str, *, deadline: float, prompt: int = 200, output: int = 100, predicted: int = 0
) -> ClassifiedRequest:
    return classified_request(
        rid,
        prompt_tokens=prompt,
        output_tokens=output,
        predicted_output_tokens=predicted or output,
        ttft_slo_ms=0.0,
        tbt_slo_ms=0.0,
        profile_ttft_ms=100.0,
        profile_tbt_ms=15.0,
        deadline_s=deadline,
    )


@pytest.fixture(scope="module")
def engine() -> SimulatedEngine:
    """A calibrated A100 / Llama-3-8B engine model."""
    return create_engine(EngineConfig(gpu="A100-80GB", model="llama-3-8b", max_num_seqs=256))


def _limits(engine: SimulatedEngine, clock_mhz: float | None = None) -> EngineLimits:
    return EngineLimits(
        engine.kv_blocks_total,
        engine.config.block_size,
        engine.cost_model,
        clock_mhz or engine.clock_mhz,
    )


def test_vectorised_iteration_time_equals_the_engine_cost_model(engine: SimulatedEngine) -> None:
    """Test that the projection's iteration time is cost_of's pure-decode duration, bit for bit."""
    rng = np.random.default_rng(3)
    batch = np.sort(rng.integers(1, 257, size=200))[::-1].astype(np.int64)
    blocks = (batch * rng.integers(5, 120, size=200)).astype(np.int64)
    for clock in (1410.0, 900.0):
        got = decode_iteration_time(engine.cost_model, clock, 16)(batch, blocks)
        want = [
            engine.cost_model.cost_of(0, int(b), float(k * 16), float(k * 16), int(b), clock)
            for b, k in zip(batch, blocks, strict=True)
        ]
        assert got == pytest.approx([c.duration_s for c in want], rel=1e-12)


def test_a_lower_clock_makes_every_iteration_slower(engine: SimulatedEngine) -> None:
    """Test that the model is priced at the clock given, not a constant."""
    batch = np.array([64, 32, 1], dtype=np.int64)
    blocks = np.array([4000, 2000, 60], dtype=np.int64)
    fast = decode_iteration_time(engine.cost_model, 1410.0, 16)(batch, blocks)
    slow = decode_iteration_time(engine.cost_model, 705.0, 16)(batch, blocks)
    assert np.all(slow > fast)


def test_an_idle_worker_always_admits(engine: SimulatedEngine) -> None:
    """Test that the first request is admitted even when it will miss its own deadline."""
    gate = AdmissionGate(enabled=True, hold_s=10.0)
    assert gate.admit(_request("a", deadline=0.001), 0.0, _limits(engine))


def test_a_candidate_that_breaks_a_running_deadline_is_refused(engine: SimulatedEngine) -> None:
    """Test that a long request is refused when it would push a tight one past its deadline."""
    gate = AdmissionGate(enabled=True, hold_s=10.0)
    limits = _limits(engine)
    alone = decode_iteration_time(engine.cost_model, engine.clock_mhz, 16)
    blocks = -(-(200 + np.arange(300, dtype=np.int64)) // 16)
    alone_s = float(np.sum(alone(np.ones(300, dtype=np.int64), blocks)))
    running = _request("tight", output=300, deadline=alone_s * 1.02)
    gate.opened(running)
    big = _request("big", prompt=6000, output=1500, deadline=1e9)
    assert not gate.admit(big, 0.0, limits)
    decision = gate.last_decision
    assert decision is not None
    assert decision.endangered == ("tight",)
    assert gate.closed


def test_a_candidate_that_fits_is_admitted(engine: SimulatedEngine) -> None:
    """Test that a short request beside a running one with slack is admitted."""
    gate = AdmissionGate(enabled=True, hold_s=10.0)
    gate.opened(_request("r", output=300, deadline=60.0))
    assert gate.admit(_request("c", output=50, deadline=60.0), 0.0, _limits(engine))
    assert not gate.closed


def test_the_kv_cache_limit_refuses_what_would_overflow(engine: SimulatedEngine) -> None:
    """Test that a projection beyond the KV capacity is refused (throttLL'eM Eq. 2)."""
    gate = AdmissionGate(enabled=True, hold_s=10.0)
    gate.opened(_request("r", prompt=1000, output=1000, deadline=1e9))
    tiny = EngineLimits(130, 16, engine.cost_model, engine.clock_mhz)
    assert not gate.admit(_request("c", prompt=1000, deadline=1e9), 0.0, tiny)
    assert gate.last_decision is not None
    assert gate.last_decision.verdict == "kv_full"


def test_a_closed_gate_refuses_at_once_and_reopens_when_a_request_ends(
    engine: SimulatedEngine,
) -> None:
    """Test that after a refusal no slot is advertised until a request ends here."""
    gate = AdmissionGate(enabled=True, hold_s=10.0)
    gate.opened(_request("r", prompt=1000, output=1000, deadline=1e9))
    tiny = EngineLimits(130, 16, engine.cost_model, engine.clock_mhz)
    assert not gate.admit(_request("c", prompt=1000, deadline=1e9), 0.0, tiny)
    assert gate.advertised_slots(64, 1) == 1
    assert not gate.admit(_request("small", prompt=1, output=1, deadline=1e9), 0.0, _limits(engine))
    assert gate.refusals == 2
    assert not gate.observe(("r",) * 5, ())
    assert gate.observe((), ("r",))
    assert not gate.closed
    assert gate.advertised_slots(64, 0) == 64


def test_a_closed_gate_reopens_after_its_hold_time(engine: SimulatedEngine) -> None:
    """Test that a refusal blocks for at most hold_s wall seconds."""
    gate = AdmissionGate(enabled=True, hold_s=0.02)
    gate.opened(_request("r", prompt=1000, output=1000, deadline=1e9))
    tiny = EngineLimits(130, 16, engine.cost_model, engine.clock_mhz)
    assert not gate.admit(_request("c", prompt=1000, deadline=1e9), 0.0, tiny)
    time.sleep(0.03)
    assert not gate.closed


def test_progress_is_counted_and_an_overrun_is_projected_to_max_tokens(
    engine: SimulatedEngine,
) -> None:
    """Test that progress shrinks the projection and max_tokens caps an overrun."""
    gate = AdmissionGate(enabled=True, hold_s=10.0)
    gate.opened(_request("r", output=400, predicted=100, deadline=1e9))
    gate.observe(("r",) * 150, ())
    assert gate.admit(_request("c", output=10, deadline=1e9), 0.0, _limits(engine))
    decision = gate.last_decision
    assert decision is not None
    # 250 tokens left to max_tokens: the running request outlasts the 10-token candidate.
    assert decision.projected_finish_s["r"] > decision.projected_finish_s["c"]


def test_disabled_admission_and_backends_without_a_model_admit_everything(
    engine: SimulatedEngine,
) -> None:
    """Test that admission off, or a backend with no limits, never refuses."""
    gate = AdmissionGate(enabled=False, hold_s=10.0)
    gate.opened(_request("r", deadline=0.0))
    assert gate.admit(_request("c", prompt=100_000, deadline=0.0), 0.0, _limits(engine))
    assert limits_of(InstantBackend(gpu="A100-80GB", model="llama-3-8b", tp=1)) is None
    sim = limits_of(SimBackend(engine, 1.0))
    assert sim is not None
    assert sim.costs is engine.cost_model
    assert sim.kv_capacity_blocks == engine.kv_blocks_total
