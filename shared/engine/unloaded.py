"""A request's execution time alone on an unloaded instance: the yardstick of its E2E SLO.

DynamoLLM sets the SLO so that "the P99 tail latency is within 5× of the execution time of a
request on an unloaded system" (``001_dynamollm.md``, SLO definition); FREESH judges a
request late when ``t_finish − t_arrival > 5·Lat_i`` with ``Lat_i`` "the no-queueing
execution time on the current GPU config" (``000_freesh.md``, Eq. 6 and Eq. 10). Online the
stack only has an estimate of ``Lat_i`` for its deadlines (predicted output × profiled TBT +
profiled TTFT). A judge has the request's true lengths and the configuration that served
it, so it measures ``Lat_i`` itself: the request replayed alone on an idle instance of that
configuration (GPU, model, TP, token budget) at the GPU's maximum clock, on the calibrated
engine. The yardstick then depends on the request and on where it ran, never on a policy's
own profiles, predictor or clocks.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

from shared.engine.api import EngineConfig, EngineRequest
from shared.engine.simulated import SimulatedEngine, create_engine

__all__ = ["UnloadedLatency", "unloaded_for", "unloaded_latency_s"]


class UnloadedLatency:
    """Execution times of requests alone on one idle instance (cached per length pair)."""

    def __init__(self, config: EngineConfig) -> None:
        """Build the idle instance of ``config`` at its GPU's maximum clock."""
        self._engine: SimulatedEngine = create_engine(dataclasses.replace(config, clock_mhz=None))
        self._ids = itertools.count()
        self._seen: dict[tuple[int, int], float] = {}

    def latency_s(self, prompt_tokens: int, output_tokens: int) -> float:
        """Seconds from arrival to the last token of the request alone on the instance.

        Raises:
            ValueError: lengths below 1, or a request the instance's KV cache can never hold.
        """
        key = (prompt_tokens, output_tokens)
        known = self._seen.get(key)
        if known is not None:
            return known
        engine = self._engine
        start = engine.now_s
        engine.add(
            EngineRequest(
                request_id=f"u{next(self._ids)}",
                prompt_tokens=prompt_tokens,
                output_tokens=output_tokens,
                arrival_s=start,
            )
        )
        while engine.has_work:
            engine.step_many(1 << 30)
        seconds = engine.now_s - start
        self._seen[key] = seconds
        return seconds


def unloaded_for(config: EngineConfig) -> UnloadedLatency:
    """The shared idle instance of ``config`` (its clock ignored: the yardstick is at the
    maximum), so every caller with the same configuration shares one cache."""
    return _instance(dataclasses.replace(config, clock_mhz=None))


@functools.lru_cache(maxsize=64)
def _instance(config: EngineConfig) -> UnloadedLatency:
    return UnloadedLatency(config)


def unloaded_latency_s(config: EngineConfig, prompt_tokens: int, output_tokens: int) -> float:
    """``Lat_i`` of a request on ``config``: alone, idle instance, maximum clock.

    Raises:
        ValueError: see :meth:`UnloadedLatency.latency_s`.
    """
    return unloaded_for(config).latency_s(prompt_tokens, output_tokens)
