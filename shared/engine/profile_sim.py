"""The simulated engine as a :class:`~shared.engine.profiler.ProfileBackend`.

Each measurement builds a fresh engine for the target, replays an open-loop Poisson stream
of the request class (common random numbers: the same unit-rate gaps and lengths scaled to
each QPS, so SLO checks are monotone enough to bisect), stops arrivals after the window and
lets the measured requests drain. Latencies come from the iteration ends, power from the
engine's energy counter over the window, as NVML's would give it. It runs in engine time
with :meth:`~shared.engine.simulated.SimulatedEngine.step_many`, and tracks each request by
its first-token and finish times only (no per-token work): TBT = (finish − first token) /
(output − 1).
"""

from __future__ import annotations

import bisect
import itertools
import random
import statistics
from dataclasses import dataclass

from shared.engine.api import EngineConfig, EngineRequest
from shared.engine.coefficients import Coefficients, load_coefficients
from shared.engine.hardware import gpu_spec
from shared.engine.profiler import (
    LoadMeasurement,
    ProfileTarget,
    RequestClass,
    UnsupportedTargetError,
)
from shared.engine.simulated import SimulatedEngine, create_engine

__all__ = ["SimWindow", "SimulatedProfileBackend"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SimWindow:
    """How long each simulated measurement runs (engine time) and how many requests it uses."""

    window_s: float = 90.0
    """Arrival window in engine time. It must be long against request durations, not just
    hold many requests: a burst shorter than an E2E is absorbed by the batch and looks
    sustainable at any rate. Simulation cost grows with engine time, not with QPS."""
    min_requests: int = 60
    """Stretch the window at low QPS to keep latency percentiles meaningful."""
    max_requests: int = 20_000
    warmup_share: float = 1.0 / 3.0
    """Leading share of requests excluded from latencies and of the window from power
    (long enough for the batch to fill: about one E2E of the longest class)."""
    drain_s: float = 120.0
    give_up_wait_s: float = 5.0
    """Stop early once more than ``give_up_share`` of the measured requests have waited this
    long for a first token: the load is certainly unsustainable under any TTFT limit below
    it at percentile ``1 − give_up_share``; what is left is reported unfinished."""
    give_up_share: float = 0.1
    """Most engine time to wait after the last arrival for measured requests to finish."""
    seed: int = 0


class SimulatedProfileBackend:
    """Measures loads on :func:`~shared.engine.simulated.create_engine` instances."""

    def __init__(
        self,
        *,
        window: SimWindow | None = None,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 8192,
        coefficients: Coefficients | None = None,
    ) -> None:
        """Create the backend (coefficients loaded once, not per measurement)."""
        self._window = window or SimWindow()
        self._max_num_seqs = max_num_seqs
        self._max_num_batched_tokens = max_num_batched_tokens
        self._coefficients = coefficients or load_coefficients()

    def _engine(self, target: ProfileTarget) -> SimulatedEngine:
        try:
            return create_engine(
                EngineConfig(
                    gpu=gpu_spec(target.gpu_type).name,
                    model=target.model,
                    tp=target.tp,
                    max_num_seqs=self._max_num_seqs,
                    max_num_batched_tokens=self._max_num_batched_tokens,
                    clock_mhz=target.clock_mhz,
                ),
                coefficients=self._coefficients,
            )
        except ValueError as error:
            raise UnsupportedTargetError(str(error)) from error

    def capacity_qps(self, target: ProfileTarget, request_class: RequestClass) -> float:
        """Return a throughput bound from the cost model: a full batch decoding at the mean
        context, plus one request's prefill time per request.

        Raises:
            UnsupportedTargetError: see :meth:`measure`.
        """
        engine = self._engine(target)
        prompt = statistics.fmean(request_class.prompt_tokens)
        output = statistics.fmean(request_class.output_tokens)
        context = prompt + output / 2
        batch = max(
            1,
            min(
                self._max_num_seqs, int(engine.kv_blocks_total * engine.config.block_size / context)
            ),
        )
        costs, clock = engine.cost_model, engine.clock_mhz
        decode = costs.cost_of(0, batch, batch * context, batch * context, batch, clock)
        prefill = costs.cost_of(round(prompt), 0, prompt * prompt / 2, prompt, 1, clock)
        return 1.0 / (output * decode.duration_s / batch + prefill.duration_s)

    def measure(
        self, target: ProfileTarget, request_class: RequestClass, qps: float
    ) -> LoadMeasurement:
        """Replay ``request_class`` at ``qps`` on a fresh engine for ``target``.

        Raises:
            UnsupportedTargetError: unknown GPU/model, or the model does not fit at that TP.
        """
        engine = self._engine(target)
        window = self._window
        count = round(min(max(qps * window.window_s, window.min_requests), window.max_requests))
        rng = random.Random(f"{window.seed}/{request_class.partition}/{request_class.name}")
        gaps = [rng.expovariate(1.0) for _ in range(count)]
        arrivals = [t / qps for t in itertools.accumulate(gaps)]
        prompts = rng.choices(request_class.prompt_tokens, k=count)
        outputs = rng.choices(request_class.output_tokens, k=count)
        cap = engine.kv_blocks_total * engine.config.block_size
        warm = int(window.warmup_share * count)
        first: dict[int, float] = {}
        finish: dict[int, float] = {}
        marks = [arrivals[warm], arrivals[-1]]
        energy_marks: list[tuple[float, float]] = []
        index = 0
        deadline = arrivals[-1] + window.drain_s
        measured_done = 0
        unserved = warm  # first measured request without a first token (FCFS admission)
        give_up = window.give_up_share * (count - warm)
        step_many = engine.step_many
        while measured_done < count - warm and engine.now_s < deadline:
            while unserved < index and unserved in first:
                unserved += 1
            waited = bisect.bisect_left(arrivals, engine.now_s - window.give_up_wait_s, unserved)
            if min(waited, index) - unserved > give_up:
                break
            next_arrival = arrivals[index] if index < count else deadline
            until = min(next_arrival, marks[0]) if marks else next_arrival
            # Run to the next event (arrival or power mark); nothing else changes the batch.
            while engine.now_s < until and (run := step_many(1 << 30, until)) is not None:
                end = engine.now_s
                if run.prefill_tokens:
                    # Only sequences completing a prefill can emit a first token, and in
                    # running order they come after every decoding sequence.
                    for rid in run.emitted[run.decode_tokens :]:
                        key = int(rid)
                        if key not in first:
                            first[key] = end
                for rid in run.finished:
                    key = int(rid)
                    finish[key] = end
                    measured_done += key >= warm
            engine.idle_until(until)
            if marks and engine.now_s >= marks[0]:
                energy_marks.append((engine.now_s, engine.energy_j))
                marks.pop(0)
            if index < count and engine.now_s >= arrivals[index]:
                prompt = min(prompts[index], cap - outputs[index])
                engine.add(
                    EngineRequest(
                        request_id=str(index),
                        prompt_tokens=max(1, prompt),
                        output_tokens=outputs[index],
                        arrival_s=arrivals[index],
                    )
                )
                index += 1
        return self._summarise(
            qps,
            engine.now_s,
            engine.clock_mhz,
            energy_marks,
            arrivals[warm:],
            warm,
            outputs,
            first,
            finish,
        )

    @staticmethod
    def _summarise(
        qps: float,
        now_s: float,
        clock_mhz: float,
        energy_marks: list[tuple[float, float]],
        measured_arrivals: list[float],
        offset: int,
        outputs: list[int],
        first: dict[int, float],
        finish: dict[int, float],
    ) -> LoadMeasurement:
        ttft: list[float] = []
        tbt: list[float] = []
        e2e: list[float] = []
        unfinished = 0
        for position, arrival in enumerate(measured_arrivals):
            key = offset + position
            # A request still waiting for its first token counts with the wait so far.
            ttft.append(first.get(key, now_s) - arrival)
            done = finish.get(key)
            if done is None:
                unfinished += 1
                continue
            e2e.append(done - arrival)
            if outputs[key] > 1:
                tbt.append((done - first[key]) / (outputs[key] - 1))
        (t0, e0), (t1, e1) = energy_marks[0], energy_marks[-1]
        power = (e1 - e0) / (t1 - t0) if t1 > t0 else 0.0
        return LoadMeasurement(
            qps=qps,
            power_w=power,
            ttft_s=tuple(ttft),
            tbt_s=tuple(tbt),
            e2e_s=tuple(e2e),
            unfinished=unfinished,
            clock_mhz=clock_mhz,
        )
