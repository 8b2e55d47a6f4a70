"""One engine instance under a clock policy, as a pure discrete loop in engine time.

``arrivals → engine.step() → every control period: controller.decide(observation) →
engine.set_clock_mhz()``. The loop builds exactly the :class:`Observation` the live agent
builds from worker stats (latency samples of the last period per request type, queue and KV
state, and for predictive control the requests with their deadlines), so a policy measured
here is the policy that runs in production. Idle gaps are charged at idle power through
:meth:`Engine.idle_until`; the run ends when every request has finished.

With an ``admission`` check (throttLL'eM §3.2), arrivals wait in a FIFO queue in front of the
engine; the head is offered again after every arrival, completion and control period, and
its wait counts in its latency.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from services.dvfs.controller import ClockController, LatencyWindow, Observation, RequestState
from shared.engine.api import Engine, EngineRequest, IterationResult
from shared.metrics.records import RecordColumns

__all__ = ["Admission", "Arrival", "InstanceRun", "engine_observation", "run_instance"]

Admission = Callable[[Observation, RequestState], bool]
"""May this request (the second argument) join the instance observed now?"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Arrival:
    """One request of a workload."""

    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    """True output length (the engine generates exactly this many tokens)."""
    request_type: str = "SS"
    predicted_output_tokens: int | None = None
    """What predictive control believes; ``None``: the true length (an oracle)."""
    e2e_slo_s: float = math.inf
    """Deadline relative to arrival (throttLL'eM's t_dead = arrival + E2E SLO)."""


@dataclass(slots=True)
class _Live:
    index: int
    arrival: Arrival
    tokens: int = 0
    last_token_s: float = math.nan
    window_gap_s: float = 0.0
    window_gaps: int = 0


@dataclass(slots=True)
class _Window:
    ttft: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    e2e: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    tbt: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """Mean token gap in the period of requests that finished during it."""
    arrivals: int = 0
    prompt_tokens: int = 0
    finished: list[tuple[str, int, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class InstanceRun:
    """Outcome of one run: per-request columns, energy, mean clocks and decision cost."""

    columns: RecordColumns
    energy_j: float
    duration_s: float
    mean_clock_mhz: float
    """Time-weighted mean clock over the run (idle time included)."""
    busy_mean_clock_mhz: float
    """Iteration-time-weighted mean clock (what the GPU ran at while working)."""
    decisions: int
    decide_cpu_s: float
    """Wall seconds spent inside ``controller.decide`` (the policy's overhead)."""


def run_instance(
    engine: Engine,
    arrivals: Sequence[Arrival],
    controller: ClockController,
    admission: Admission | None = None,
) -> InstanceRun:
    """Replay ``arrivals`` (sorted by time) on ``engine`` under ``controller``.

    ``admission`` (optional) gates each arrival, FIFO, before it reaches the engine.

    Raises:
        ValueError: when arrivals are not sorted or the engine rejects a request.
    """
    if any(b.arrival_s < a.arrival_s for a, b in itertools.pairwise(arrivals)):
        raise ValueError("arrivals must be sorted by arrival_s")
    n = len(arrivals)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    produced = np.zeros(n, dtype=np.int64)
    live: dict[str, _Live] = {}
    window = _Window()
    period = controller.period_s
    next_control, next_arrival = period, 0
    clock_time = busy_clock_time = busy_time = decide_cpu = 0.0
    decisions = 0
    start_s = engine.now_s
    pending: deque[int] = deque()
    offer = False

    def admit(index: int) -> None:
        arrival = arrivals[index]
        engine.add(EngineRequest(request_id=arrival.request_id,
                                 prompt_tokens=arrival.prompt_tokens,
                                 output_tokens=arrival.output_tokens,
                                 arrival_s=arrival.arrival_s))  # fmt: skip
        live[arrival.request_id] = _Live(index, arrival)

    while True:
        now = engine.now_s
        while next_arrival < n and arrivals[next_arrival].arrival_s <= now:
            arrival = arrivals[next_arrival]
            if admission is None:
                admit(next_arrival)
            else:
                pending.append(next_arrival)
                offer = True
            window.arrivals += 1
            window.prompt_tokens += arrival.prompt_tokens
            next_arrival += 1
        if admission is not None and pending and (offer or not engine.has_work):
            while pending and (
                not live or admission(_snapshot(engine, live), _candidate(arrivals[pending[0]]))
            ):
                admit(pending.popleft())
            offer = False
        if now >= next_control:
            observation = _observe(engine, live, window, period)
            began = time.perf_counter()
            engine.set_clock_mhz(controller.decide(observation))
            decide_cpu += time.perf_counter() - began
            decisions += 1
            offer = True
            window = _Window()
            while next_control <= now:
                next_control += period
        if engine.has_work:
            clock = engine.clock_mhz
            result = engine.step()
            if result is None:  # pragma: no cover - has_work promised an iteration
                break
            clock_time += clock * result.duration_s
            busy_clock_time += clock * result.duration_s
            busy_time += result.duration_s
            _record(result, live, window, first, finish, produced)
            offer = offer or bool(result.finished)
        elif next_arrival < n:
            target = min(arrivals[next_arrival].arrival_s, next_control)
            clock_time += engine.clock_mhz * max(target - now, 0.0)
            engine.idle_until(target)
        else:
            break
    duration = engine.now_s - start_s
    columns = RecordColumns(
        request_class=np.array([a.request_type for a in arrivals], dtype=np.str_),
        arrival_s=np.array([a.arrival_s for a in arrivals], dtype=np.float64),
        first_token_s=first,
        finish_s=finish,
        output_tokens=produced,
        predicted_output_tokens=np.array(
            [a.predicted_output_tokens or a.output_tokens for a in arrivals], dtype=np.int64
        ),
        latency_budget_s=np.array([a.e2e_slo_s for a in arrivals], dtype=np.float64),
        completed=np.isfinite(finish),
    )
    return InstanceRun(
        columns=columns,
        energy_j=engine.energy_j,
        duration_s=duration,
        mean_clock_mhz=clock_time / duration if duration > 0 else engine.clock_mhz,
        busy_mean_clock_mhz=busy_clock_time / busy_time if busy_time > 0 else engine.clock_mhz,
        decisions=decisions,
        decide_cpu_s=decide_cpu,
    )


def _record(
    result: IterationResult,
    live: dict[str, _Live],
    window: _Window,
    first: NDArray[np.float64],
    finish: NDArray[np.float64],
    produced: NDArray[np.int64],
) -> None:
    end = result.start_s + result.duration_s
    for request_id in result.emitted:
        state = live[request_id]
        if state.tokens == 0:
            first[state.index] = end
            window.ttft[state.arrival.request_type].append(end - state.arrival.arrival_s)
        else:
            state.window_gap_s += end - state.last_token_s
            state.window_gaps += 1
        state.tokens += 1
        state.last_token_s = end
    for request_id in result.finished:
        state = live.pop(request_id)
        finish[state.index] = end
        produced[state.index] = state.tokens
        window.e2e[state.arrival.request_type].append(end - state.arrival.arrival_s)
        arrival = state.arrival
        window.finished.append((arrival.request_type, arrival.prompt_tokens, state.tokens))
        if state.window_gaps:  # its last gaps still count for this period's TBT
            window.tbt[state.arrival.request_type].append(state.window_gap_s / state.window_gaps)


def _request_state(state: _Live) -> RequestState:
    arrival = state.arrival
    predicted = arrival.predicted_output_tokens or arrival.output_tokens
    return RequestState(
        request_id=arrival.request_id,
        prompt_tokens=arrival.prompt_tokens,
        generated_tokens=state.tokens,
        predicted_remaining_tokens=max(predicted - state.tokens, 1),
        deadline_s=arrival.arrival_s + arrival.e2e_slo_s,
        running=state.tokens > 0,
    )


def _candidate(arrival: Arrival) -> RequestState:
    return _request_state(_Live(-1, arrival))


def engine_observation(
    engine: Engine,
    *,
    now_s: float | None = None,
    latencies: Mapping[str, LatencyWindow] | None = None,
    arrival_rate_rps: float = 0.0,
    prompt_tokens_per_s: float = 0.0,
    requests: Sequence[RequestState] = (),
    finished: Sequence[tuple[str, int, int]] = (),
) -> Observation:
    """What a clock controller sees of a simulated engine: its clock, queue and KV now
    (at ``now_s`` if given, else the engine's time), plus what the caller measured."""
    return Observation(
        now_s=engine.now_s if now_s is None else now_s,
        clock_mhz=engine.clock_mhz,
        supported_clocks_mhz=engine.supported_clocks_mhz,
        num_running=engine.num_running,
        num_waiting=engine.num_waiting,
        kv_blocks_used=engine.kv_blocks_used,
        kv_blocks_total=engine.kv_blocks_total,
        block_size=engine.config.block_size,
        latencies=latencies if latencies is not None else {},
        arrival_rate_rps=arrival_rate_rps,
        prompt_tokens_per_s=prompt_tokens_per_s,
        requests=requests,
        finished=finished,
    )


def _snapshot(engine: Engine, live: dict[str, _Live]) -> Observation:
    """The instance's requests and KV, for an admission check (no latency windows)."""
    return engine_observation(
        engine, requests=tuple(_request_state(state) for state in live.values())
    )


def _observe(engine: Engine, live: dict[str, _Live], window: _Window, period: float) -> Observation:
    tbt = window.tbt
    requests: list[RequestState] = []
    for state in live.values():
        if state.window_gaps:
            tbt[state.arrival.request_type].append(state.window_gap_s / state.window_gaps)
            state.window_gap_s, state.window_gaps = 0.0, 0
        requests.append(_request_state(state))
    types = set(window.ttft) | set(window.e2e) | set(tbt)
    latencies = {
        t: LatencyWindow(
            ttft_s=tuple(window.ttft.get(t, ())),
            tbt_s=tuple(tbt.get(t, ())),
            e2e_s=tuple(window.e2e.get(t, ())),
        )
        for t in types
    }
    return engine_observation(
        engine,
        latencies=latencies,
        arrival_rate_rps=window.arrivals / period,
        prompt_tokens_per_s=window.prompt_tokens / period,
        requests=tuple(requests),
        finished=tuple(window.finished),
    )
