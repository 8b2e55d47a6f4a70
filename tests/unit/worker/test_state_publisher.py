"""The worker's instance state and how the dvfs agent turns it into predictive requests."""

from __future__ import annotations

import msgspec

from proto.codec import decode, encode
from proto.messages import InstanceState
from services.dvfs.observations import observation_for, remaining_tokens, with_requests
from services.worker.backend import BackendSnapshot
from services.worker.state_publisher import build_state
from services.worker.streams import RequestStream
from shared.config import WorkerSettings
from tests.factories import classified_request, worker_stats

SNAP = BackendSnapshot(
    gpu="A100-80GB",
    model="llama-3-8b",
    tp=1,
    running=1,
    waiting=1,
    kv_blocks_used=70,
    kv_blocks_total=28086,
    kv_block_size=16,
    clock_mhz=1050.0,
    power_w=250.0,
    energy_j=1e4,
)


def _state() -> InstanceState:
    running = RequestStream(
        classified_request("r1", prompt_tokens=1000, output_tokens=400,
                           predicted_output_tokens=300, deadline_s=50.0),
        accepted_at=0.0,
        produced=120,
    )  # fmt: skip
    queued = RequestStream(classified_request("r2", prompt_tokens=64, deadline_s=9.0), 0.0)
    cfg = WorkerSettings(worker_id="w0", node_id="n0", pool_id="p")
    return build_state(cfg, [running, queued], SNAP, now_s=20.0, at=1.0)


def test_the_state_carries_each_request_and_the_engine_and_survives_the_wire() -> None:
    """Test that the snapshot names every request's progress, prediction, cap and deadline."""
    state = decode(encode(_state()), InstanceState)
    assert (state.worker_id, state.node_id, state.now_s) == ("w0", "n0", 20.0)
    assert (state.kv_blocks_used, state.waiting, state.clock_mhz) == (70, 1, 1050.0)
    first, second = state.requests
    assert (first.prompt_tokens, first.generated_tokens) == (1000, 120)
    assert (first.predicted_output_tokens, first.max_tokens, first.deadline_s) == (300, 400, 50.0)
    assert (second.request_id, second.generated_tokens) == ("r2", 0)
    assert first.tbt_slo_s == 0.1  # the factory's class: 100 ms between tokens


def test_the_agent_projects_from_the_state_and_caps_an_overrun_at_max_tokens() -> None:
    """Test the predictive observation: remaining tokens, running flag, deadlines and KV."""
    state = _state()
    observation = with_requests(observation_for(worker_stats("w0"), {}, 20.0), state)
    r1, r2 = observation.requests
    assert (r1.predicted_remaining_tokens, r1.running, r1.deadline_s) == (180, True, 50.0)
    assert (r2.predicted_remaining_tokens, r2.running) == (5, False)
    assert (observation.kv_blocks_used, observation.block_size) == (70, 16)
    assert r1.tbt_slo_s == 0.1
    # A worker that sends no class SLO (0, the field's default) leaves the agent's own bound.
    anonymous = msgspec.structs.replace(
        state, requests=[msgspec.structs.replace(state.requests[0], tbt_slo_s=0.0)]
    )
    plain = with_requests(observation_for(worker_stats("w0"), {}, 20.0), anonymous)
    assert plain.requests[0].tbt_slo_s is None
    # Past its prediction a request may run to its cap (throttLL'eM §1.5).
    overrun = msgspec.structs.replace(state.requests[0], generated_tokens=350)
    assert remaining_tokens(overrun) == 50
    done = msgspec.structs.replace(state.requests[0], generated_tokens=400)
    assert remaining_tokens(done) == 1
