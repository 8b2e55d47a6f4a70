"""What the live dvfs agent observes of each instance: latency samples from completions, and
for predictive control the requests of the worker's :class:`proto.messages.InstanceState`.

Each ``Completion`` on ``request.done`` gives one request's TTFT, mean TBT and E2E; they are
converted to model seconds (× speed-up, so thresholds mean the same at any speed-up) and
kept per worker and request class until the next control period takes them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

from proto.messages import Completion, InstanceState, RequestProgress, WorkerStats
from services.dvfs.controller import LatencyWindow, Observation, RequestState
from shared.engine import gpu_spec

__all__ = ["LatencyCollector", "observation_for", "remaining_tokens", "with_requests"]


@dataclass(slots=True)
class _Samples:
    ttft: list[float] = field(default_factory=list)
    tbt: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)


class LatencyCollector:
    """Latency samples per worker and class since the last :meth:`take`."""

    def __init__(self, speedup: float) -> None:
        self._speedup = speedup
        self._samples: dict[str, dict[str, _Samples]] = defaultdict(lambda: defaultdict(_Samples))

    def add(self, done: Completion) -> None:
        """Record one finished request."""
        k = self._speedup
        samples = self._samples[done.worker_id][done.request_class]
        samples.ttft.append((done.first_token_at - done.sent_at) * k)
        samples.e2e.append((done.finished_at - done.sent_at) * k)
        if done.output_tokens >= 2:
            gaps = done.output_tokens - 1
            samples.tbt.append((done.finished_at - done.first_token_at) * k / gaps)

    def take(self, worker_id: str) -> dict[str, LatencyWindow]:
        """The worker's samples of the last period, by class; the window starts afresh."""
        by_class = self._samples.pop(worker_id, {})
        return {
            cls: LatencyWindow(ttft_s=tuple(s.ttft), tbt_s=tuple(s.tbt), e2e_s=tuple(s.e2e))
            for cls, s in by_class.items()
        }


def observation_for(
    stats: WorkerStats, latencies: dict[str, LatencyWindow], now_s: float
) -> Observation:
    """Build a controller observation of one instance from its heartbeat and samples."""
    try:
        clocks = gpu_spec(stats.gpu).supported_clocks_mhz
    except (KeyError, ValueError):
        clocks = (stats.clock_mhz,)
    return Observation(
        now_s=now_s,
        clock_mhz=stats.clock_mhz,
        supported_clocks_mhz=clocks,
        num_running=stats.running,
        num_waiting=stats.waiting,
        kv_blocks_used=stats.kv_blocks_used,
        kv_blocks_total=max(stats.kv_blocks_total, 1),
        block_size=stats.kv_block_size,
        latencies=latencies,
    )


def remaining_tokens(progress: RequestProgress) -> int:
    """Tokens still to come as predicted; past its prediction, up to its cap (throttLL'eM §1.5)."""
    if progress.generated_tokens < progress.predicted_output_tokens:
        return progress.predicted_output_tokens - progress.generated_tokens
    return max(progress.max_tokens - progress.generated_tokens, 1)


def with_requests(observation: Observation, state: InstanceState) -> Observation:
    """The observation with the worker's requests, queue and KV from its instance state."""
    requests = tuple(
        RequestState(
            request_id=r.request_id,
            prompt_tokens=r.prompt_tokens,
            generated_tokens=r.generated_tokens,
            predicted_remaining_tokens=remaining_tokens(r),
            deadline_s=r.deadline_s,
            running=r.generated_tokens > 0,
            tbt_slo_s=r.tbt_slo_s or None,
        )
        for r in state.requests
    )
    return replace(
        observation,
        num_running=state.running,
        num_waiting=state.waiting,
        kv_blocks_used=state.kv_blocks_used,
        kv_blocks_total=max(state.kv_blocks_total, 1),
        block_size=state.kv_block_size,
        requests=requests,
    )
