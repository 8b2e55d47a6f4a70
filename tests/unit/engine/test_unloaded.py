"""The E2E yardstick: a request alone on an idle instance at the GPU's maximum clock."""

from __future__ import annotations

import math

import pytest

from shared.engine.api import EngineConfig, EngineRequest
from shared.engine.simulated import create_engine
from shared.engine.unloaded import UnloadedLatency, unloaded_latency_s

H100_TP4 = EngineConfig(gpu="H100-80GB", model="llama-3-70b", tp=4)


def _alone(config: EngineConfig, prompt: int, output: int) -> float:
    engine = create_engine(config)
    engine.add(EngineRequest(request_id="r", prompt_tokens=prompt, output_tokens=output))
    last = 0.0
    while (result := engine.step()) is not None:
        last = result.start_s + result.duration_s
    return last


@pytest.mark.parametrize(("prompt", "output"), [(1, 1), (1024, 128), (7435, 6), (20000, 40)])
def test_it_is_the_request_replayed_alone_on_a_fresh_engine(prompt: int, output: int) -> None:
    """Test that the cached instance gives what a fresh engine running only that request
    gives, for one-token, chunked (prompt above the 8,192-token budget) and typical sizes."""
    alone = _alone(H100_TP4, prompt, output)
    assert math.isclose(unloaded_latency_s(H100_TP4, prompt, output), alone)


def test_it_is_measured_at_the_maximum_clock_whatever_the_config_says() -> None:
    """Test that a configuration's clock does not move the yardstick (a policy cannot
    loosen its own bound by lowering clocks), while the maximum clock is faster than a low
    one."""
    slow = EngineConfig(gpu="H100-80GB", model="llama-3-70b", tp=4, clock_mhz=990.0)
    assert unloaded_latency_s(slow, 2048, 64) == unloaded_latency_s(H100_TP4, 2048, 64)
    assert _alone(slow, 2048, 64) > unloaded_latency_s(H100_TP4, 2048, 64)


def test_it_grows_with_the_prompt_and_with_fewer_gpus() -> None:
    """Test that a long prompt gets a longer yardstick than a short one with the same
    output (the pool-average profile gave both the same), and TP4 a longer one than TP8."""
    tp8 = EngineConfig(gpu="H100-80GB", model="llama-3-70b", tp=8)
    assert unloaded_latency_s(H100_TP4, 7435, 6) > 2 * unloaded_latency_s(H100_TP4, 1024, 6)
    assert unloaded_latency_s(H100_TP4, 7435, 6) > unloaded_latency_s(tp8, 7435, 6)


def test_requests_that_never_fit_are_refused() -> None:
    """Test that a request beyond the KV cache, or without tokens, raises ValueError."""
    alone = UnloadedLatency(EngineConfig(gpu="A100-80GB", model="llama-3-8b"))
    with pytest.raises(ValueError):
        alone.latency_s(10_000_000, 10)
    with pytest.raises(ValueError):
        alone.latency_s(0, 10)
