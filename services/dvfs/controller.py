"""The one interface every clock policy implements, and what a policy sees each period.

A DVFS policy is a pure object: each control period the agent (live shell or offline
simulator) builds an :class:`Observation` of one engine instance and asks
:meth:`ClockController.decide` for a target SM clock in MHz. All GPUs of a tensor-parallel
instance share that clock (FREESH §2.3, throttLL'eM §3.3). Policies may keep state between
calls (MIAD remembers its unsnapped target), but do no I/O.

Times are model (engine) seconds; latencies are seconds.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = [
    "ClockController",
    "FixedClockController",
    "LatencyWindow",
    "Observation",
    "RequestState",
    "SloThresholds",
    "snap_clock",
    "snap_clock_down",
    "snap_clock_up",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SloThresholds:
    """Latency thresholds of one request type (seconds)."""

    ttft_s: float
    """Time to first token."""
    tbt_s: float
    """Time between tokens (a request's mean gap)."""
    e2e_s: float
    """End-to-end latency."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LatencyWindow:
    """Latency samples of one request type observed during the last control period.

    Each tuple holds one value per request: TTFT of requests whose first token arrived in
    the window, the mean token gap of requests that emitted at least two tokens in the
    window, and E2E of requests that finished in the window.
    """

    ttft_s: tuple[float, ...] = ()
    tbt_s: tuple[float, ...] = ()
    e2e_s: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestState:
    """One request the instance holds (running or queued), for predictive control."""

    request_id: str
    prompt_tokens: int
    """Input length |q_i| (throttLL'eM Table I)."""
    generated_tokens: int
    """Output tokens already produced."""
    predicted_remaining_tokens: int
    """Tokens still to generate, as predicted (r̂_i minus generated); >= 1."""
    deadline_s: float
    """Absolute model time by which the last token is due (arrival + E2E SLO)."""
    running: bool = True
    """False while the request waits in the engine's queue (its prefill is pending)."""
    tbt_slo_s: float | None = None
    """Its class's mean time-between-tokens bound; ``None``: the controller's own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """What the agent sees of one instance at one control period."""

    now_s: float
    """Model time of the decision."""
    clock_mhz: float
    """Clock currently applied."""
    supported_clocks_mhz: tuple[float, ...]
    """Clocks the GPU accepts, ascending."""
    num_running: int = 0
    num_waiting: int = 0
    kv_blocks_used: int = 0
    kv_blocks_total: int = 1
    block_size: int = 16
    """Tokens per KV block (N in throttLL'eM Eq. 1)."""
    latencies: Mapping[str, LatencyWindow] = field(default_factory=dict)
    """Latency samples of the last period, by request type (SS, SL, LS, LL, ...)."""
    arrival_rate_rps: float = 0.0
    """Requests per second that arrived over the last period (the profile policy's load)."""
    prompt_tokens_per_s: float = 0.0
    """Prompt tokens per second that arrived over the last period (prefill load)."""
    requests: Sequence[RequestState] = ()
    """Requests on the instance; filled for predictive control only."""
    finished: Sequence[tuple[str, int, int]] = ()
    """(type, prompt tokens, output tokens) of the requests that finished in the period: the
    served mix, for a policy that learns it (the instance simulator fills it; the live agent
    reads completions from the bus instead)."""

    def __post_init__(self) -> None:
        if not self.supported_clocks_mhz:
            raise ValueError("supported_clocks_mhz must not be empty")
        if any(b <= a for a, b in itertools.pairwise(self.supported_clocks_mhz)):
            raise ValueError("supported_clocks_mhz must be strictly ascending")

    @property
    def max_clock_mhz(self) -> float:
        """The highest supported clock."""
        return self.supported_clocks_mhz[-1]


@runtime_checkable
class ClockController(Protocol):
    """A clock policy: one decision per control period."""

    @property
    def period_s(self) -> float:
        """How often the agent should call :meth:`decide` (model seconds)."""
        ...

    def decide(self, observation: Observation) -> float:
        """Return the target clock in MHz, one of ``observation.supported_clocks_mhz``."""
        ...


def snap_clock(mhz: float, supported_mhz: Sequence[float]) -> float:
    """Return the supported clock nearest to ``mhz`` (ties go to the higher clock).

    Args:
        mhz: wanted clock.
        supported_mhz: supported clocks, ascending, not empty.
    """
    index = bisect.bisect_left(supported_mhz, mhz)
    if index == 0:
        return supported_mhz[0]
    if index == len(supported_mhz):
        return supported_mhz[-1]
    below, above = supported_mhz[index - 1], supported_mhz[index]
    return below if mhz - below < above - mhz else above


def snap_clock_up(mhz: float, supported_mhz: Sequence[float]) -> float:
    """Return the lowest supported clock >= ``mhz`` (the highest when none is)."""
    index = bisect.bisect_left(supported_mhz, mhz)
    return supported_mhz[min(index, len(supported_mhz) - 1)]


def snap_clock_down(mhz: float, supported_mhz: Sequence[float]) -> float:
    """Return the highest supported clock <= ``mhz`` (the lowest when none is)."""
    index = bisect.bisect_right(supported_mhz, mhz)
    return supported_mhz[max(index - 1, 0)]


@dataclass(slots=True)
class FixedClockController:
    """Always the same clock (``None``: the GPU's maximum): the papers' baseline."""

    clock_mhz: float | None = None
    period_s: float = 1.0

    def decide(self, observation: Observation) -> float:
        """Return the fixed clock snapped to a supported one."""
        if self.clock_mhz is None:
            return observation.max_clock_mhz
        return snap_clock(self.clock_mhz, observation.supported_clocks_mhz)
