"""One simulated engine instance in cluster time, advanced lazily.

An instance is stepped only when something needs its state (a placement decision, a control
tick, a sample) or when the pool queue waits for one of its slots. Between those moments
nothing can change its batch, so running its iterations back to back is exact and costs
no event-heap traffic per iteration. Engine time is cluster time minus ``origin_s`` (the
moment the instance was started; engines count from 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from shared.engine import EngineConfig, EngineRequest, IterationRun, MultiStepEngine, create_engine
from shared.engine.unloaded import UnloadedLatency, unloaded_for

__all__ = ["LatencySamples", "RequestState", "SimInstance"]

_UNBOUNDED = 1 << 40
"""Iteration cap of one ``step_many`` call: runs end at a finish, a bound or a batch change."""


class RequestState:
    """Everything the simulator tracks about one request (one object per request)."""

    __slots__ = (
        "arrival_s",
        "first_s",
        "index",
        "instance",
        "judged_class",
        "judged_lat_s",
        "last_s",
        "lat_s",
        "mark_s",
        "mark_tokens",
        "max_gap_s",
        "output",
        "placed_s",
        "pool",
        "predicted",
        "prompt",
        "reject_reason",
        "rejected",
        "request_class",
        "request_id",
        "tbt_profile_s",
        "token_times",
        "tokens",
        "ttft_profile_s",
    )

    def __init__(self, index: int, arrival_s: float, prompt: int, output: int) -> None:
        """Create the state of a request that has just arrived."""
        self.index = index
        self.request_id = f"r{index}"
        self.arrival_s = arrival_s
        self.prompt = prompt
        self.output = output
        self.predicted = output
        self.request_class = "?"
        self.pool = ""
        self.placed_s = 0.0
        self.lat_s = 0.0
        self.judged_class = "?"
        """The class of the request's true lengths: what its SLO is judged by."""
        self.judged_lat_s = 0.0
        """Lat (FREESH Eq. 6) of its true lengths: the request alone on an idle instance
        of the configuration that serves it, at the GPU's maximum clock
        (:mod:`shared.engine.unloaded`); its E2E bound is 5× this (Eq. 10), whatever the
        policy's predictor, profiles or clocks (``lat_s`` is the stack's own estimate, which
        the control loops see as the live stack does)."""
        self.ttft_profile_s = 0.0
        self.tbt_profile_s = 0.0
        self.first_s = -1.0
        self.last_s = -1.0
        self.tokens = 0
        self.max_gap_s = 0.0
        self.mark_s = 0.0
        self.mark_tokens = 0
        self.instance: SimInstance | None = None
        self.rejected = False
        self.reject_reason = ""
        """Why it was refused (the classifier's error code, or ``kv_cache``); empty if not."""
        self.token_times: list[float] | None = None


@dataclass(slots=True)
class LatencySamples:
    """Latencies of one request class seen by one instance since the last control tick."""

    ttft_s: list[float] = field(default_factory=list)
    tbt_s: list[float] = field(default_factory=list)
    e2e_s: list[float] = field(default_factory=list)


FinishHook = Callable[["SimInstance", RequestState, float], None]


class SimInstance:
    """An engine plus the requests placed on it and its lifecycle in cluster time."""

    __slots__ = (
        "controller",
        "draining",
        "engine",
        "gate_until",
        "instance_id",
        "kv_seen",
        "node",
        "on_finish",
        "origin_s",
        "placed",
        "pool_id",
        "ready_s",
        "region",
        "requests",
        "samples",
        "stopped_s",
        "wake_pending",
        "yardstick",
    )

    def __init__(
        self,
        instance_id: str,
        *,
        pool_id: str,
        region: str,
        config: EngineConfig,
        start_s: float,
        ready_s: float,
        on_finish: FinishHook,
    ) -> None:
        """Start an instance at cluster time ``start_s``; it serves from ``ready_s``."""
        self.instance_id = instance_id
        self.pool_id = pool_id
        self.region = region
        engine = create_engine(config)
        if not isinstance(engine, MultiStepEngine):
            raise TypeError("the simulator needs an engine with step_many (api.MultiStepEngine)")
        self.engine: MultiStepEngine = engine
        self.yardstick: UnloadedLatency = unloaded_for(config)
        """Requests alone on an idle instance of this configuration: their judged Lat."""
        self.origin_s = start_s
        self.ready_s = ready_s
        self.requests: dict[str, RequestState] = {}
        self.draining = False
        self.stopped_s: float | None = None
        self.wake_pending = False
        self.on_finish = on_finish
        self.samples: dict[str, LatencySamples] = {}
        self.controller: object | None = None
        self.kv_seen = 0
        """KV blocks in use at the last stats heartbeat (the live router's view)."""
        self.gate_until = -1.0
        """Cluster time until which the simulated admission gate refuses placements (it
        refused one; a request ending here opens it sooner)."""
        self.placed = 0
        """Requests handed to the engine since the clock controller last looked (its load)."""
        self.node: object | None = None
        """The :class:`~loadgen.simulator.nodes.Node` whose GPUs it holds."""

    @property
    def now_s(self) -> float:
        """Cluster time up to which the engine has run."""
        return self.origin_s + self.engine.now_s

    @property
    def gpus(self) -> int:
        """GPUs this instance occupies."""
        return self.engine.config.tp

    def free_slots(self, max_num_seqs: int) -> int:
        """Requests it may still accept (the worker shim's rule: max_num_seqs − held)."""
        return max_num_seqs - len(self.requests)

    def add(self, state: RequestState, now_s: float) -> None:
        """Hand a request to the engine at cluster time ``now_s``.

        Raises:
            ValueError: when the engine can never fit it (the caller rejects it).
        """
        self.engine.add(
            EngineRequest(
                request_id=state.request_id,
                prompt_tokens=state.prompt,
                output_tokens=state.output,
                arrival_s=max(0.0, now_s - self.origin_s),
            )
        )
        state.instance = self
        state.placed_s = now_s
        state.judged_lat_s = self.yardstick.latency_s(state.prompt, state.output)
        self.requests[state.request_id] = state
        self.placed += 1

    def advance(self, t_s: float) -> None:
        """Run iterations (or idle) until engine time reaches cluster time ``t_s``."""
        engine = self.engine
        target = t_s - self.origin_s
        while engine.now_s < target:
            run = engine.step_many(_UNBOUNDED, target)
            if run is None:
                engine.idle_until(target)
                return
            self._apply(run)

    def run_to_next_finish(self, bound_s: float) -> float:
        """Step until a request finishes or ``bound_s`` is passed; return the cluster time.

        Only safe while nothing else can change the batch (the instance is full); the pool
        uses it to learn when the next slot frees.
        """
        engine = self.engine
        target = bound_s - self.origin_s
        while engine.now_s < target:
            run = engine.step_many(_UNBOUNDED, target)
            if run is None:
                return self.origin_s + engine.now_s
            if self._apply(run):
                break
        return self.origin_s + engine.now_s

    def stall(self, seconds: float) -> None:
        """Hold the engine for ``seconds`` at idle power (a clock change in progress)."""
        self.engine.idle_until(self.engine.now_s + seconds)

    def _apply(self, run: IterationRun) -> bool:
        """Book a run of iterations (``step_many``): tokens, first-token and finish times.

        A run of several iterations is pure decode of one unchanged batch (the engine's
        contract), so every emitted request got one token per iteration and only the last
        iteration may finish requests.
        """
        origin = self.origin_s
        count = len(run.durations_s)
        if count == 1:
            first = last = origin + run.start_s + run.durations_s[0]
            inner_gap = 0.0
            ends: tuple[float, ...] = (first,)
        else:
            ends = tuple(origin + e for e in run.ends_s)
            first, last = ends[0], ends[-1]
            inner_gap = max(run.durations_s[1:])
        requests = self.requests
        for request_id in run.emitted:
            state = requests[request_id]
            if state.tokens == 0:
                state.first_s = first
                state.mark_s = first
                state.mark_tokens = 1
                self._sample(state.request_class).ttft_s.append(first - state.arrival_s)
                gap = inner_gap
            else:
                gap = max(first - state.last_s, inner_gap)
            if gap > state.max_gap_s:
                state.max_gap_s = gap
            state.tokens += count
            state.last_s = last
            if state.token_times is not None:
                state.token_times.extend(ends)
        if not run.finished:
            return False
        for request_id in run.finished:
            state = requests.pop(request_id)
            samples = self._sample(state.request_class)
            samples.e2e_s.append(last - state.arrival_s)
            if state.tokens - state.mark_tokens >= 1 and state.tokens >= 2:
                samples.tbt_s.append((last - state.mark_s) / (state.tokens - state.mark_tokens))
            self.on_finish(self, state, last)
        return True

    def _sample(self, request_class: str) -> LatencySamples:
        samples = self.samples.get(request_class)
        if samples is None:
            samples = self.samples[request_class] = LatencySamples()
        return samples

    def take_samples(self) -> dict[str, LatencySamples]:
        """Return and reset this period's latency samples, TBT of running requests included."""
        for state in self.requests.values():
            if state.tokens - state.mark_tokens >= 1 and state.tokens >= 2:
                gap = (state.last_s - state.mark_s) / (state.tokens - state.mark_tokens)
                self._sample(state.request_class).tbt_s.append(gap)
                state.mark_s = state.last_s
                state.mark_tokens = state.tokens
        samples = self.samples
        self.samples = {}
        return samples
