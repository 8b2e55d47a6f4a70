"""The fast scheduler and step_many give exactly the reference scheduler's iterations."""

from __future__ import annotations

import random
from typing import Any

import pytest

from shared.engine import EngineConfig, EngineRequest, IterationResult, create_engine
from shared.engine.batching import BatchStep, ContinuousBatcher, Sequence
from shared.engine.fast_batching import DecodeGroupBatcher
from shared.engine.simulated import SimulatedEngine


def _fields(step: BatchStep) -> tuple[Any, ...]:
    return (step.prefill_tokens, step.decode_seqs, step.attention_pairs, step.kv_read_tokens,
            step.emitted, step.finished, step.preempted)  # fmt: skip


def _drive_batchers(seed: int) -> tuple[int, int]:
    """Drive both schedulers through one random workload; return (steps, preemptions)."""
    rng = random.Random(seed)
    shape = {
        "total_blocks": rng.randint(30, 120),
        "block_size": rng.choice([1, 2, 4, 16]),
        "max_num_seqs": rng.choice([2, 8, 32]),
        "max_num_batched_tokens": rng.choice([3, 16, 64, 256]),
    }
    reference, fast = ContinuousBatcher(**shape), DecodeGroupBatcher(**shape)
    capacity = reference.max_tokens_that_fit()
    steps = preemptions = 0
    for index in range(60):
        prompt = rng.randint(1, max(1, capacity // 3))
        output = rng.randint(1, max(1, min(80, capacity - prompt)))
        for batcher in (reference, fast):
            batcher.add(Sequence(f"r{index}", prompt, output, 0.0))
        for _ in range(rng.randint(0, 12)):
            expected, got = reference.schedule(), fast.schedule()
            assert (expected is None) == (got is None)
            if expected is None or got is None:
                break
            assert _fields(got) == _fields(expected)
            assert fast.used_blocks == reference.used_blocks <= reference.total_blocks
            assert (fast.num_running, fast.num_waiting) == (reference.num_running,
                                                            reference.num_waiting)  # fmt: skip
            steps += 1
            preemptions += len(expected.preempted)
        if rng.random() < 0.1:
            victim = f"r{rng.randint(0, index)}"
            assert fast.abort(victim) == reference.abort(victim)
    while (expected := reference.schedule()) is not None:
        got = fast.schedule()
        assert got is not None
        assert _fields(got) == _fields(expected)
        steps += 1
        preemptions += len(expected.preempted)
    assert fast.schedule() is None
    assert fast.used_blocks == 0
    return steps, preemptions


def test_fast_scheduler_matches_reference_on_random_workloads_with_preemption() -> None:
    """Test that DecodeGroupBatcher makes the reference's every decision, preemption included."""
    total_steps = total_preemptions = 0
    for seed in range(150):
        steps, preemptions = _drive_batchers(seed)
        total_steps += steps
        total_preemptions += preemptions
    assert total_steps > 10_000
    assert total_preemptions > 100


def test_running_reports_current_counters_of_grouped_sequences() -> None:
    """Test that running() shows the same computed/generated/blocks as the reference."""
    shape = {"total_blocks": 500, "block_size": 4, "max_num_seqs": 8, "max_num_batched_tokens": 64}
    reference, fast = ContinuousBatcher(**shape), DecodeGroupBatcher(**shape)
    for batcher in (reference, fast):
        for index in range(6):
            batcher.add(Sequence(str(index), 10 + 7 * index, 50, 0.0))
        for _ in range(23):
            batcher.schedule()
    state = [(s.request_id, s.computed, s.generated, s.blocks) for s in reference.running()]
    assert [(s.request_id, s.computed, s.generated, s.blocks) for s in fast.running()] == state
    assert fast.schedule() is not None


def _result_fields(result: IterationResult) -> tuple[Any, ...]:
    return (result.start_s, result.duration_s, result.prefill_tokens, result.decode_tokens,
            result.emitted, result.finished, result.preempted, result.energy_j, result.power_w,
            result.clock_mhz, result.kv_blocks_used)  # fmt: skip


def _engine_trace(engine: SimulatedEngine, seed: int, *, many: bool) -> list[tuple[Any, ...]]:
    """Replay one random arrival stream with clock changes and aborts; return every iteration."""
    rng = random.Random(seed)
    run_lengths = random.Random(-seed)  # separate stream: the workload must not depend on it
    trace: list[tuple[Any, ...]] = []
    runs_of_several = 0

    def record_until(until: float) -> None:
        nonlocal runs_of_several
        while engine.has_work and engine.now_s < until:
            if not many:
                result = engine.step()
                assert result is not None
                trace.append(_result_fields(result))
                continue
            run = engine.step_many(run_lengths.randint(1, 400), until)
            assert run is not None
            if run.iterations > 1:
                runs_of_several += 1
                assert run.prefill_tokens == 0
                assert not run.preempted
            trace.extend(_result_fields(result) for result in run.results())
            assert engine.now_s == run.end_s

    now = 0.0
    for index in range(250):
        now += rng.expovariate(rng.choice([2.0, 40.0]))
        record_until(now)
        engine.idle_until(now)
        if rng.random() < 0.05:
            engine.set_clock_mhz(rng.choice([600.0, 900.0, 1410.0]))
        if rng.random() < 0.05:
            engine.abort(f"r{rng.randint(0, index)}")
        request = EngineRequest(request_id=f"r{index}", prompt_tokens=rng.randint(1, 2500),
                                output_tokens=rng.randint(1, 600), arrival_s=now)  # fmt: skip
        engine.add(request)
    record_until(float("inf"))
    trace.append((engine.now_s, engine.energy_j, engine.kv_blocks_used))
    assert not many or runs_of_several > 0
    return trace


_TP4_70B = EngineConfig(gpu="A100-80GB", model="llama-3-70b", tp=4, block_size=16,
                       max_num_batched_tokens=1024, gpu_memory_utilization=0.6)  # fmt: skip
_TP1_8B = EngineConfig(gpu="H100-80GB", model="llama-3-8b", tp=1, block_size=16,
                       max_num_seqs=64, gpu_memory_utilization=0.28)  # fmt: skip


@pytest.mark.parametrize(("config", "seed"), [(_TP4_70B, 1), (_TP4_70B, 2), (_TP1_8B, 3)])
def test_engine_step_and_step_many_reproduce_the_reference_engine_bit_for_bit(
    config: EngineConfig, seed: int
) -> None:
    """Test that durations, energy, emitted/finished/preempted ids equal the reference path."""
    expected = _engine_trace(create_engine(config, reference=True), seed, many=False)
    assert any(row[6] for row in expected[:-1]), "the workload must preempt"
    assert _engine_trace(create_engine(config), seed, many=False) == expected
    assert _engine_trace(create_engine(config), seed, many=True) == expected


def test_step_many_stops_at_bounds_and_at_the_first_finish() -> None:
    """Test step_many's contract: None past until_s, max_iterations, stop after a finish."""
    engine = create_engine(EngineConfig(gpu="H100-80GB", model="llama-3-8b"))
    assert engine.step_many(10) is None
    for index in range(4):
        engine.add(
            EngineRequest(request_id=str(index), prompt_tokens=100, output_tokens=20 + index)
        )
    first = engine.step_many(50)
    assert first is not None
    assert first.iterations == 1
    assert first.prefill_tokens == 400
    assert engine.step_many(0) is None
    assert engine.step_many(5, until_s=engine.now_s) is None
    bounded = engine.step_many(5)
    assert bounded is not None
    assert bounded.iterations == 5
    assert bounded.finished == ()
    until = engine.now_s + 3.5 * bounded.durations_s[-1]
    timed = engine.step_many(100, until_s=until)
    assert timed is not None
    assert timed.iterations == 4
    assert timed.end_s >= until
    to_finish = engine.step_many(100)
    assert to_finish is not None
    assert to_finish.finished == ("0",)
    assert to_finish.emitted == ("0", "1", "2", "3")
    assert 1 + 5 + 4 + to_finish.iterations == 20
