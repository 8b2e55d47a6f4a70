"""Unit tests of the offline cluster simulator on tiny, hand-checkable scenarios."""

from __future__ import annotations

import numpy as np
import pydantic
import pytest

from loadgen.simulator.carbon import CarbonClock
from loadgen.simulator.cluster import ClusterSimulator
from loadgen.simulator.policies import policy_by_name
from loadgen.simulator.pools import PROFILE_REQUEST, measure_profile
from loadgen.simulator.results import SimResult
from loadgen.simulator.scenario import Scenario
from loadgen.traces import TraceRequest, synthetic_trace
from shared.engine import EngineConfig, EngineRequest, create_engine

INTENSITY = 400.0


def _scenario(gpus: int = 2, **extra: object) -> Scenario:
    raw: dict[str, object] = {
        "name": "tiny",
        "model": "llama-3-8b",
        "start_utc": "2022-06-15T00:00:00Z",
        "regions": [{"name": "R", "carbon": "CISO", "gpus": {"H100-80GB": gpus}}],
        "engine": {"max_num_seqs": 8},
        "control": {"sample_period_s": 5.0, "dvfs_period_s": 1.0, "scale_period_s": 60.0},
    }
    raw.update(extra)
    return Scenario.model_validate(raw)


def _run(trace: list[TraceRequest], policy: str = "max-clock-fcfs-rr", gpus: int = 2) -> SimResult:
    carbon = CarbonClock({"R": np.full(48, INTENSITY)}, start_offset_s=3600.0)
    sim = ClusterSimulator(_scenario(gpus), policy_by_name(policy, tp=1), trace, carbon=carbon)
    return sim.run()


def _trace(n_s: float = 30.0, seed: int = 3) -> list[TraceRequest]:
    return synthetic_trace(
        rate_rps=3.0, duration_s=n_s, seed=seed, mean_prompt_tokens=400, mean_output_tokens=60
    )


def test_every_arrival_ends_completed_or_rejected_with_exact_token_counts() -> None:
    """Test that each request completes with exactly its output length or is rejected."""
    trace = [*_trace(), TraceRequest(31.0, 2_000_000, 10)]
    result = _run(trace)
    assert result.requests == len(trace)
    assert result.completed + result.rejected == len(trace)
    assert result.rejected == 1
    assert result.token_mismatch == 0
    done = result.columns.completed
    expected = np.array([t.output_tokens for t in trace])[done]
    assert np.array_equal(result.columns.output_tokens[done], expected)


def test_two_runs_with_the_same_trace_give_identical_results() -> None:
    """Test that the simulator is deterministic for a fixed trace and seed."""
    first, second = _run(_trace(seed=5)), _run(_trace(seed=5))
    assert np.array_equal(first.columns.finish_s, second.columns.finish_s)
    assert first.energy_j == second.energy_j


def test_energy_is_at_least_idle_power_times_time_on_every_gpu() -> None:
    """Test that simulated energy never falls below the fleet's idle power over the run."""
    result = _run(_trace())
    idle_w = create_engine(EngineConfig(gpu="H100-80GB", model="llama-3-8b")).idle_power_w
    assert result.energy_j >= idle_w * 2 * result.sim_s * 0.999
    assert result.energy_j > idle_w * 2 * result.sim_s  # serving costs more than idling


def test_a_lone_request_sees_exactly_the_engine_profile_latency() -> None:
    """Test that one request alone gets the TTFT and TBT its engine measures in isolation."""
    prompt, output = PROFILE_REQUEST
    result = _run([TraceRequest(0.0, prompt, output)], gpus=1)
    ttft, tbt = measure_profile(EngineConfig(gpu="H100-80GB", model="llama-3-8b", max_num_seqs=8))
    cols = result.columns
    assert cols.first_token_s[0] == pytest.approx(ttft, rel=1e-9)
    assert cols.finish_s[0] - cols.first_token_s[0] == pytest.approx(tbt * (output - 1), rel=1e-9)


def test_co2_is_energy_times_the_regions_intensity() -> None:
    """Test that with a flat 400 g/kWh grid, CO2 equals energy in kWh times 400 g."""
    result = _run(_trace())
    assert result.co2_kg == pytest.approx(result.energy_j / 3.6e6 * INTENSITY / 1000.0)


def test_reactive_scaling_uses_fewer_gpu_hours_than_static_sizing() -> None:
    """Test that the reactive scaler switches idle instances off under light load."""
    trace = synthetic_trace(rate_rps=0.3, duration_s=240.0, seed=1, mean_output_tokens=40)
    static = _run(trace, "max-clock-fcfs-rr", gpus=4)
    scaled = _run(trace, "scale-inst", gpus=4)
    assert scaled.gpu_hours < static.gpu_hours
    assert scaled.completed == static.completed == len(trace)


def test_a_scenario_with_an_unknown_key_is_refused() -> None:
    """Test that a typo in a scenario file is an error, not a silent default."""
    with pytest.raises(pydantic.ValidationError):
        _scenario(engine={"max_num_seq": 8})


def test_the_slo_clock_floor_is_the_lowest_clock_meeting_the_guarded_ttft() -> None:
    """Test that a lone boundary prompt meets guard × TTFT at the floor, not one step below."""
    from dataclasses import replace

    from services.dvfs.slo_miad import slo_clock_floor_mhz
    from shared.domain.classes import default_slos, scheme_by_name

    scheme = scheme_by_name("dynamollm9")
    slos = default_slos(scheme)
    config = EngineConfig(gpu="A100-80GB", model="llama-3-70b", tp=4, max_num_seqs=8)
    floor = slo_clock_floor_mhz(config, scheme, slos, 0.8)
    clocks = create_engine(config).supported_clocks_mhz
    below = clocks[clocks.index(floor) - 1]

    def lone_ttft(clock: float) -> float:
        engine = create_engine(replace(config, clock_mhz=clock))
        engine.add(EngineRequest(request_id="x", prompt_tokens=1023, output_tokens=1))
        result = engine.step()
        assert result is not None
        return result.start_s + result.duration_s

    budget = 0.8 * slos["MS"].ttft_ms / 1000.0
    assert lone_ttft(floor) <= budget < lone_ttft(below)


def test_given_request_ids_are_used_and_must_match_the_trace() -> None:
    """Test that replayed ids name the simulated requests and a wrong count is refused."""
    trace = _trace(n_s=5.0)
    carbon = CarbonClock({"R": np.full(48, INTENSITY)}, start_offset_s=3600.0)
    policy = policy_by_name("max-clock-fcfs-rr", tp=1)
    ids = [f"live-{i}" for i in range(len(trace))]
    sim = ClusterSimulator(_scenario(), policy, trace, carbon=carbon, request_ids=ids)
    sim.run()
    assert [s.request_id for s in sim.states] == ids
    with pytest.raises(ValueError, match="one id per trace entry"):
        ClusterSimulator(_scenario(), policy, trace, carbon=carbon, request_ids=ids[:-1])


def test_the_planned_policy_serves_more_load_in_the_lower_carbon_region_than_single_pool() -> None:
    """Test that the epoch planner (carbon objective) shifts load to the cleaner region."""
    hourly = {"CLEAN": np.full(48, 100.0), "DIRTY": np.full(48, 700.0)}
    scenario = _scenario(
        regions=[
            {"name": "CLEAN", "carbon": "BPAT", "gpus": {"H100-80GB": 3}},
            {"name": "DIRTY", "carbon": "PJM", "gpus": {"H100-80GB": 3}},
        ],
        control={"sample_period_s": 5.0, "epoch_s": 60.0, "steps_per_epoch": 6},
        delays={"instance_start_s": 5.0},
    )
    carbon = CarbonClock(hourly, start_offset_s=3600.0)
    trace = _trace(n_s=120.0)
    shares = {}
    for name in ("single-pool", "greenserve-planned"):
        sim = ClusterSimulator(
            scenario,
            policy_by_name(name, tp=1),
            trace,
            carbon=carbon,
            carbon_forecast=lambda region, t_s: carbon.forecast(region, t_s),
        )
        result = sim.run()
        assert result.completed == len(trace)
        by_region = result.energy_wh_by_region or {}
        shares[name] = by_region["CLEAN"] / sum(by_region.values())
        if name == "greenserve-planned":
            assert result.plans, "the planner never planned"
            assert all(p["status"] == "optimal" for p in result.plans)
    assert shares["greenserve-planned"] > shares["single-pool"] + 0.1


def test_multi_pool_sends_each_class_only_to_its_own_pool() -> None:
    """Test that MultiPool gives every class with load its own pool and routes it there."""
    trace = _trace(n_s=40.0)
    carbon = CarbonClock({"R": np.full(48, INTENSITY)}, start_offset_s=3600.0)
    sim = ClusterSimulator(
        _scenario(gpus=8), policy_by_name("multi-pool", tp=1), trace, carbon=carbon
    )
    result = sim.run()
    assert result.completed == len(trace)
    assert sum(p.max_instances for p in sim.pools) == 8
    for state in sim.states:
        assert state.pool == f"class-{state.request_class}"


def test_class_instance_counts_give_one_each_and_the_rest_by_share() -> None:
    """Test that MultiPool sizing gives every class one instance and splits the rest by share."""
    from loadgen.simulator.multipool import class_instance_counts

    assert class_instance_counts({"A": 0.7, "B": 0.2, "C": 0.1}, 10) == {"A": 6, "B": 2, "C": 2}
    with pytest.raises(ValueError):
        class_instance_counts({"A": 0.5, "B": 0.5}, 1)


def _stats_view_run(phase_s: float) -> SimResult:
    """live-static (BF-IO on a heartbeat-old KV view) with the heartbeat at ``phase_s``."""
    control = {"sample_period_s": 5.0, "stats_period_s": 2.5, "stats_phase_s": phase_s}
    scenario = _scenario(3, control=control)
    carbon = CarbonClock({"R": np.full(48, INTENSITY)}, start_offset_s=3600.0)
    trace = synthetic_trace(
        rate_rps=6.0, duration_s=20.0, seed=11, mean_prompt_tokens=800, mean_output_tokens=60
    )
    policy = policy_by_name("live-static", tp=1)
    return ClusterSimulator(scenario, policy, trace, carbon=carbon).run()


def test_the_heartbeat_phase_changes_what_the_stats_view_router_sees() -> None:
    """Test that the phase moves first tokens, and that a whole period is phase 0 again."""
    at_zero = _stats_view_run(0.0)
    whole_period = _stats_view_run(2.5).columns.first_token_s
    # NaN: a prompt beyond the model's 8k context is refused in both runs.
    assert np.array_equal(at_zero.columns.first_token_s, whole_period, equal_nan=True)
    shifted = [_stats_view_run(phase).columns.first_token_s for phase in (0.6, 1.3, 1.9)]
    assert any(not np.array_equal(at_zero.columns.first_token_s, s) for s in shifted)


def test_dynamollm_instance_managers_lower_the_clock_at_light_load_and_serve_everything() -> None:
    """Test clock="profile": each instance's profile-based manager moves its clock off max."""
    trace = _trace(n_s=60.0, seed=7)
    result = _run(trace, policy="scale-freq-profile", gpus=4)
    assert result.completed == len(trace)
    assert result.clock_changes > 0
    assert result.clock_mode == "profile"
    at_max = _run(trace, policy="max-clock-fcfs-rr", gpus=4)
    assert result.energy_j < at_max.energy_j


def test_refused_requests_are_counted_by_cause_not_raised() -> None:
    """Test that a prompt beyond the model's context and an empty output are counted
    refusals with their cause, and the run serves everything else."""
    trace = [*_trace(), TraceRequest(31.0, 9000, 10), TraceRequest(32.0, 100, 0)]
    result = _run(trace)
    assert result.rejected_by_reason == {"bad_lengths": 1, "too_long": 1}
    assert result.completed == len(trace) - 2


def test_a_request_is_judged_on_its_true_lengths_whatever_the_predictor_guessed() -> None:
    """Test that the SLO columns carry each request's true class and the Lat of its true
    lengths alone on an idle instance of the configuration that served it (FREESH Eq. 6),
    while the control loops keep the guess, so two predictors are measured against the same
    bounds."""
    from loadgen.simulator.results import columns_of
    from shared.engine.unloaded import unloaded_latency_s

    carbon = CarbonClock({"R": np.full(48, INTENSITY)}, start_offset_s=3600.0)
    policy = policy_by_name("max-clock-fcfs-rr", tp=1, predictor="quantile")
    sim = ClusterSimulator(_scenario(), policy, _trace(), carbon=carbon)
    sim.run()
    states = [s for s in sim.states if not s.rejected]
    assert any(s.predicted != s.output for s in states)  # the guess differs somewhere
    for state in states:
        assert state.judged_class == sim.scheme.classify(state.prompt, state.output)
        assert state.instance is not None
        config = state.instance.engine.config
        assert state.judged_lat_s == unloaded_latency_s(config, state.prompt, state.output)
    columns = columns_of(sim)
    assert list(columns.request_class) == [s.judged_class for s in sim.states]
    judged = [s.judged_lat_s for s in sim.states if not s.rejected]
    assert np.allclose(columns.latency_budget_s[~np.isnan(columns.latency_budget_s)], judged)


def test_the_yardstick_does_not_depend_on_the_policys_profile() -> None:
    """Test that two policies differing only in where their pools' profiled TTFT and TBT
    come from (the engine, or the classifier's defaults) judge every request against the
    same E2E bound: the yardstick is measured by the judge, not taken from the policy."""
    carbon = CarbonClock({"R": np.full(48, INTENSITY)}, start_offset_s=3600.0)
    bounds = []
    for profile in ("measured", "classifier-default"):
        policy = policy_by_name("max-clock-fcfs-rr", tp=1, profile=profile)
        sim = ClusterSimulator(_scenario(), policy, _trace(), carbon=carbon)
        sim.run()
        bounds.append([s.judged_lat_s for s in sim.states])
        lats = [s.lat_s for s in sim.states]
    assert bounds[0] == bounds[1]
    assert lats != bounds[1]  # the stack's own estimate differs: it is not the yardstick
