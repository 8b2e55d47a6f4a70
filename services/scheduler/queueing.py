"""Queue disciplines for waiting requests: FCFS, EDF, SRTF, SSJF with aging, LLF.

Every discipline keeps its waiting requests in a binary heap keyed by a *static* number,
so ``push``/``pop``/``remove`` cost O(log n) even with thousands of queued requests:

- FCFS: arrival time.
- EDF: deadline t_arr + α·Lat (FREESH §2.4 baseline, α = 1.4).
- SRTF: predicted remaining tokens.
- SSJF with aging (μ-Serve §3.3): predicted length minus ``aging_tokens_per_s`` × wait.
  The wait grows at the same rate for every waiting request, so the order equals the order
  of N̂ + k·t_arr, a static key.
- LLF (FREESH Eq. 6): ℓ_i(t) = t_arr + W_i − t − T_remain falls at the same rate for every
  *waiting* request, so the order equals the order of t_arr + W_i − T_remain.

A key changes only when a request's progress changes (``update_progress``), which re-keys
that one request. Removal is lazy (the heap entry is skipped when popped). Ties break on
arrival time, then on push order, so every discipline is deterministic.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from services.scheduler.laxity import (
    ALPHA_LLF,
    deadline_s,
    no_queue_latency_s,
    remaining_time_s,
)

__all__ = [
    "DEFAULT_AGING_TOKENS_PER_S",
    "DISCIPLINES",
    "HeapDiscipline",
    "QueueDiscipline",
    "QueuedRequest",
    "UnknownDisciplineError",
    "make_discipline",
    "pop_best",
]

DEFAULT_AGING_TOKENS_PER_S: Final = 10.0
"""SSJF aging rate: tokens of predicted length forgiven per second of waiting.

μ-Serve leaves the aging formula open ("fluid limits for SJF with aging"); with 10 tok/s a
request predicted 1,000 tokens longer than a newcomer overtakes it after 100 s of waiting.
"""


@dataclass(slots=True, kw_only=True)
class QueuedRequest:
    """One request waiting in (or re-entering) a scheduler queue."""

    request_id: str
    """Unique request identifier."""
    arrival_s: float
    """Arrival time on the scheduler clock, in seconds."""
    prompt_tokens: int
    """Input length in tokens."""
    predicted_output_tokens: int
    """Classifier's predicted output length N̂."""
    ttft_s: float
    """Profiled no-queue TTFT of the serving configuration."""
    tbt_s: float
    """Profiled TBT of the serving configuration."""
    generated_tokens: int = 0
    """Tokens already produced (for preemptive re-ranking)."""
    payload: object = None
    """Opaque to the core; the shell keeps its message here."""

    @property
    def latency_s(self) -> float:
        """Lat_i = N̂·TBT + TTFT (FREESH Eq. 6)."""
        return no_queue_latency_s(self.predicted_output_tokens, self.ttft_s, self.tbt_s)

    @property
    def remaining_tokens(self) -> int:
        """Predicted tokens still to generate (never negative)."""
        return max(self.predicted_output_tokens - self.generated_tokens, 0)

    @property
    def remaining_s(self) -> float:
        """T_remain: predicted processing time still needed (FREESH Eq. 6)."""
        return remaining_time_s(
            self.predicted_output_tokens, self.generated_tokens, self.ttft_s, self.tbt_s
        )


class QueueDiscipline(Protocol):
    """What the scheduler shell and the simulator need from a queue."""

    name: str

    def push(self, item: QueuedRequest) -> None:
        """Add a request (replacing any queued request with the same id)."""
        ...

    def pop(self, now_s: float) -> QueuedRequest | None:
        """Remove and return the best request by the discipline at ``now_s``."""
        ...

    def remove(self, request_id: str) -> QueuedRequest | None:
        """Remove a request by id; return it, or None when it is not queued."""
        ...

    def ordered(self, now_s: float) -> list[QueuedRequest]:
        """Return the queued requests, best first, without removing them."""
        ...

    def __len__(self) -> int:
        """Return how many requests are queued."""
        ...


class UnknownDisciplineError(ValueError):
    """A discipline name that :func:`make_discipline` does not know."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown queue discipline {name!r}; choose one of {sorted(DISCIPLINES)}")
        self.name = name


_Key = Callable[[QueuedRequest], float]
_Entry = tuple[float, float, int, str]


class HeapDiscipline:
    """A queue ordered by a static per-request key (smaller is served first).

    Args:
        name: discipline name, e.g. ``"llf"``.
        key: static priority of a waiting request; see the module docstring for why every
            supported discipline has one.
    """

    __slots__ = ("_counter", "_heap", "_key", "_live", "name")

    def __init__(self, name: str, key: _Key) -> None:
        self.name = name
        self._key = key
        self._heap: list[_Entry] = []
        self._live: dict[str, tuple[int, QueuedRequest]] = {}
        self._counter = itertools.count()

    def key(self, item: QueuedRequest) -> float:
        """Return the static priority of ``item`` (smaller is served first)."""
        return self._key(item)

    def push(self, item: QueuedRequest) -> None:
        """Add ``item``; a queued request with the same id is replaced."""
        seq = next(self._counter)
        self._live[item.request_id] = (seq, item)
        heapq.heappush(self._heap, (self._key(item), item.arrival_s, seq, item.request_id))

    def _drop_stale(self) -> None:
        heap, live = self._heap, self._live
        while heap:
            _, _, seq, request_id = heap[0]
            current = live.get(request_id)
            if current is not None and current[0] == seq:
                return
            heapq.heappop(heap)

    def peek(self, now_s: float) -> QueuedRequest | None:
        """Return the best request without removing it, or None when empty."""
        del now_s  # static keys: the best item does not depend on the time
        self._drop_stale()
        if not self._heap:
            return None
        return self._live[self._heap[0][3]][1]

    def pop(self, now_s: float) -> QueuedRequest | None:
        """Remove and return the best request, or None when empty."""
        del now_s
        self._drop_stale()
        if not self._heap:
            return None
        request_id = heapq.heappop(self._heap)[3]
        return self._live.pop(request_id)[1]

    def remove(self, request_id: str) -> QueuedRequest | None:
        """Remove a request by id (lazily in the heap); return it or None."""
        entry = self._live.pop(request_id, None)
        if len(self._heap) > 2 * len(self._live) + 64:
            self._compact()
        return None if entry is None else entry[1]

    def update_progress(self, request_id: str, generated_tokens: int) -> bool:
        """Record progress of a queued request and re-rank it; False when not queued."""
        entry = self._live.get(request_id)
        if entry is None:
            return False
        entry[1].generated_tokens = generated_tokens
        self.push(entry[1])
        return True

    def ordered(self, now_s: float) -> list[QueuedRequest]:
        """Return queued requests best first (O(n log n); for inspection, not hot paths)."""
        del now_s
        entries = sorted(
            (self._key(item), item.arrival_s, seq, item) for seq, item in self._live.values()
        )
        return [entry[3] for entry in entries]

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._live

    def __len__(self) -> int:
        return len(self._live)

    def _compact(self) -> None:
        # Lazy deletion leaves dead entries behind; rebuild once they dominate the heap.
        self._heap = [
            (self._key(item), item.arrival_s, seq, request_id)
            for request_id, (seq, item) in self._live.items()
        ]
        heapq.heapify(self._heap)


def _fcfs_key(item: QueuedRequest) -> float:
    return item.arrival_s


def _srtf_key(item: QueuedRequest) -> float:
    return float(item.remaining_tokens)


def _edf_key(alpha: float) -> _Key:
    def key(item: QueuedRequest) -> float:
        return deadline_s(
            item.arrival_s, item.predicted_output_tokens, item.ttft_s, item.tbt_s, alpha
        )

    return key


def _llf_key(alpha: float) -> _Key:
    # ℓ_i(t) + t: the part of FREESH Eq. 6 laxity that does not move while waiting.
    def key(item: QueuedRequest) -> float:
        return item.arrival_s + alpha * item.latency_s - item.remaining_s

    return key


def _ssjf_key(aging_tokens_per_s: float) -> _Key:
    # N̂ − k·(t − t_arr) orders like N̂ + k·t_arr for every t (μ-Serve SSJF with aging).
    def key(item: QueuedRequest) -> float:
        return item.predicted_output_tokens + aging_tokens_per_s * item.arrival_s

    return key


def _make_fcfs() -> HeapDiscipline:
    return HeapDiscipline("fcfs", _fcfs_key)


def _make_edf(alpha: float = ALPHA_LLF) -> HeapDiscipline:
    return HeapDiscipline("edf", _edf_key(alpha))


def _make_srtf() -> HeapDiscipline:
    return HeapDiscipline("srtf", _srtf_key)


def _make_ssjf(aging_tokens_per_s: float = DEFAULT_AGING_TOKENS_PER_S) -> HeapDiscipline:
    if aging_tokens_per_s < 0:
        raise ValueError("aging_tokens_per_s must be non-negative")
    return HeapDiscipline("ssjf", _ssjf_key(aging_tokens_per_s))


def _make_llf(alpha: float = ALPHA_LLF) -> HeapDiscipline:
    return HeapDiscipline("llf", _llf_key(alpha))


DISCIPLINES: Final[dict[str, Callable[..., HeapDiscipline]]] = {
    "fcfs": _make_fcfs,
    "edf": _make_edf,
    "srtf": _make_srtf,
    "ssjf": _make_ssjf,
    "llf": _make_llf,
}
"""Discipline factories by name; parameters: edf/llf ``alpha``, ssjf ``aging_tokens_per_s``."""


def make_discipline(name: str, **params: float) -> HeapDiscipline:
    """Return an empty queue for the named discipline.

    Args:
        name: one of ``"fcfs"``, ``"edf"``, ``"srtf"``, ``"ssjf"``, ``"llf"``
            (case-insensitive).
        **params: ``alpha`` for EDF/LLF (default 1.4, FREESH α_LLF);
            ``aging_tokens_per_s`` for SSJF (default 10).

    Raises:
        UnknownDisciplineError: for an unknown name.
        TypeError: for a parameter the discipline does not take.
    """
    factory = DISCIPLINES.get(name.lower())
    if factory is None:
        raise UnknownDisciplineError(name)
    return factory(**params)


def pop_best(queue: QueueDiscipline, slots: int, now_s: float) -> list[QueuedRequest]:
    """The scheduler's dispatch decision: remove and return up to ``slots`` requests, best
    first by the queue's discipline.

    The scheduler shell answers a router's pull with this
    (:meth:`services.scheduler.pool_queues.SchedulerState.pop`); the cluster simulator
    takes a pool's requests for its free slots with it, so both hand the same requests on.
    """
    taken: list[QueuedRequest] = []
    while len(taken) < slots and (item := queue.pop(now_s)) is not None:
        taken.append(item)
    return taken
