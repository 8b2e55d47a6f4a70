"""Router placement: which waiting requests to admit this step, and on which worker.

This is the router's stable, pure interface. The asyncio shell (``service.py``) and the
offline decode simulator both build :class:`WorkerLoad` snapshots and :class:`Candidate`
lists, call :meth:`Placer.place`, and act on the ``(request_id, worker_id)`` pairs it
returns. Placement is sticky: a placed request stays on its worker for its whole life
(BF-IO, seed 003, Sec. 2), so a placer only ever decides about *new* requests.

Baselines follow the BF-IO paper's definitions (seed 003, Sec. 2.4 and Appendix B):
FCFS fill (Algorithm 2), join-the-shortest-queue, round robin, power-of-two choices, plus
least-loaded by KV tokens. Every placer first admits *urgent* candidates (laxity at or
below ``urgent_laxity_s``), so the scheduler's least-laxity-first order (FREESH Eq. 6)
can never be starved by a placement policy.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

__all__ = [
    "DEFAULT_URGENT_LAXITY_S",
    "PLACER_NAMES",
    "Candidate",
    "FcfsFillPlacer",
    "JoinShortestQueuePlacer",
    "LeastLoadedPlacer",
    "Placer",
    "PowerOfTwoPlacer",
    "RoundRobinPlacer",
    "WorkerLoad",
    "make_placer",
    "place_by_model",
    "urgent_first",
]

DEFAULT_URGENT_LAXITY_S: Final = 0.05
"""Laxity (seconds) at or below which a candidate must be admitted now, whatever the policy."""


@dataclass(slots=True, kw_only=True)
class WorkerLoad:
    """A snapshot of one decode worker, as the router sees it before a decision."""

    worker_id: str
    free_slots: int
    """Sequences it can still admit now (batch slots, capped by free KV blocks)."""
    running: int
    """Sequences running."""
    kv_tokens: int
    """KV tokens in use: prompt plus generated tokens of its running sequences."""
    predicted_remaining: tuple[int, ...] = ()
    """Predicted remaining output tokens of each running sequence (BF-IO lookahead)."""
    running_kv: tuple[int, ...] = ()
    """Current KV tokens of each running sequence, aligned with ``predicted_remaining``.
    When absent, every running sequence is assumed to hold ``kv_tokens / running``."""
    model: str = ""
    """The model it serves (its announcement); :func:`place_by_model` gives it only
    candidates of that model."""


@dataclass(slots=True, kw_only=True)
class Candidate:
    """A waiting request the scheduler offers for placement."""

    request_id: str
    prompt_tokens: int
    predicted_output_tokens: int
    laxity_s: float = float("inf")
    """Scheduler laxity (FREESH Eq. 6); nearly spent means it must be admitted now."""
    model: str = ""
    """The model the request asks for."""


class Placer(Protocol):
    """A placement policy. Implementations may keep state between calls (a cursor, an RNG)."""

    name: str

    def place(
        self, candidates: Sequence[Candidate], workers: Sequence[WorkerLoad]
    ) -> list[tuple[str, str]]:
        """Return ``(request_id, worker_id)`` pairs to admit now.

        Never more pairs per worker than its ``free_slots``; each request at most once;
        candidates left out stay queued.
        """
        ...


def urgent_first(candidates: Sequence[Candidate], urgent_laxity_s: float) -> list[Candidate]:
    """Return the candidates with urgent ones first (least laxity first), others in order.

    The stable partition keeps the scheduler's order among non-urgent candidates, which is
    what FCFS-style baselines must preserve (BF-IO seed 003, Algorithm 2).
    """
    urgent = [c for c in candidates if c.laxity_s <= urgent_laxity_s]
    if not urgent:
        return list(candidates)
    urgent.sort(key=lambda c: c.laxity_s)
    return urgent + [c for c in candidates if c.laxity_s > urgent_laxity_s]


def place_by_model(
    placer: Placer, candidates: Sequence[Candidate], workers: Sequence[WorkerLoad]
) -> list[tuple[str, str]]:
    """``placer``'s pairs, each model's candidates placed on that model's workers alone.

    A worker runs one model, so a request placed on another model's worker would be answered
    by the wrong model. The placers themselves stay model-blind: each model's candidates and
    workers (in their given orders) are one placement problem of their own. Candidates of a
    model no worker serves are left out (they stay queued).
    """
    by_model: dict[str, list[Candidate]] = {}
    for cand in candidates:
        by_model.setdefault(cand.model, []).append(cand)
    pairs: list[tuple[str, str]] = []
    for model, group in by_model.items():
        serving = [w for w in workers if w.model == model]
        if serving:
            pairs += placer.place(group, serving)
    return pairs


def _capacity(workers: Sequence[WorkerLoad]) -> int:
    return sum(max(0, w.free_slots) for w in workers)


class FcfsFillPlacer:
    """FCFS fill (BF-IO seed 003, Algorithm 2): workers in index order, queue head first."""

    name = "fcfs-fill"

    def __init__(self, *, urgent_laxity_s: float = DEFAULT_URGENT_LAXITY_S) -> None:
        """Create the placer; ``urgent_laxity_s`` is the must-admit laxity threshold."""
        self.urgent_laxity_s = urgent_laxity_s

    def place(
        self, candidates: Sequence[Candidate], workers: Sequence[WorkerLoad]
    ) -> list[tuple[str, str]]:
        """Fill worker 0's free slots from the queue head, then worker 1's, and so on."""
        queue = iter(urgent_first(candidates, self.urgent_laxity_s))
        pairs: list[tuple[str, str]] = []
        for worker in workers:
            for _ in range(max(0, worker.free_slots)):
                nxt = next(queue, None)
                if nxt is None:
                    return pairs
                pairs.append((nxt.request_id, worker.worker_id))
        return pairs


class _KeyedGreedyPlacer:
    """Place candidates in queue order, each on the worker with the smallest key."""

    name = "keyed"

    def __init__(self, *, urgent_laxity_s: float = DEFAULT_URGENT_LAXITY_S) -> None:
        self.urgent_laxity_s = urgent_laxity_s

    def _key(self, worker: WorkerLoad) -> float:
        raise NotImplementedError

    def _added(self, candidate: Candidate) -> float:
        raise NotImplementedError

    def place(
        self, candidates: Sequence[Candidate], workers: Sequence[WorkerLoad]
    ) -> list[tuple[str, str]]:
        """Give each candidate, in queue order, to the open worker with the smallest key."""
        # Heap of (key, index) keeps ties on the lowest worker index, a deterministic rule.
        heap = [(self._key(w), i) for i, w in enumerate(workers) if w.free_slots > 0]
        heapq.heapify(heap)
        free = [max(0, w.free_slots) for w in workers]
        pairs: list[tuple[str, str]] = []
        for cand in urgent_first(candidates, self.urgent_laxity_s):
            if not heap:
                break
            key, index = heapq.heappop(heap)
            pairs.append((cand.request_id, workers[index].worker_id))
            free[index] -= 1
            if free[index] > 0:
                heapq.heappush(heap, (key + self._added(cand), index))
        return pairs


class JoinShortestQueuePlacer(_KeyedGreedyPlacer):
    """JSQ (seed 003, Sec. 2.4): fewest running sequences; ties to the lowest index."""

    name = "jsq"

    def _key(self, worker: WorkerLoad) -> float:
        return float(worker.running)

    def _added(self, candidate: Candidate) -> float:
        return 1.0


class LeastLoadedPlacer(_KeyedGreedyPlacer):
    """Least KV tokens in use, counting the prompts placed earlier in the same decision."""

    name = "least-loaded"

    def _key(self, worker: WorkerLoad) -> float:
        return float(worker.kv_tokens)

    def _added(self, candidate: Candidate) -> float:
        return float(candidate.prompt_tokens)


class RoundRobinPlacer:
    """Round robin (seed 003, Sec. 2.4): request n to worker n mod G, skipping full workers."""

    name = "rr"

    def __init__(self, *, urgent_laxity_s: float = DEFAULT_URGENT_LAXITY_S) -> None:
        """Create the placer with its cursor at worker 0."""
        self.urgent_laxity_s = urgent_laxity_s
        self._cursor = 0

    def place(
        self, candidates: Sequence[Candidate], workers: Sequence[WorkerLoad]
    ) -> list[tuple[str, str]]:
        """Place candidates in queue order, advancing a cursor that persists across calls."""
        free = [max(0, w.free_slots) for w in workers]
        remaining = sum(free)
        pairs: list[tuple[str, str]] = []
        count = len(workers)
        for cand in urgent_first(candidates, self.urgent_laxity_s):
            if remaining == 0:
                break
            while free[self._cursor % count] == 0:
                self._cursor += 1
            index = self._cursor % count
            pairs.append((cand.request_id, workers[index].worker_id))
            free[index] -= 1
            remaining -= 1
            self._cursor += 1
        return pairs


class PowerOfTwoPlacer:
    """Power-of-d choices (seed 003, Sec. 2.4): sample d open workers, take the fewest running."""

    name = "p2c"

    def __init__(
        self, *, seed: int = 0, choices: int = 2, urgent_laxity_s: float = DEFAULT_URGENT_LAXITY_S
    ) -> None:
        """Create the placer with its own seeded RNG (deterministic given ``seed``)."""
        self.urgent_laxity_s = urgent_laxity_s
        self.choices = max(1, choices)
        self._rng = random.Random(seed)

    def place(
        self, candidates: Sequence[Candidate], workers: Sequence[WorkerLoad]
    ) -> list[tuple[str, str]]:
        """Place candidates in queue order on the less-occupied of d sampled open workers."""
        free = [max(0, w.free_slots) for w in workers]
        running = [w.running for w in workers]
        open_workers = [i for i, f in enumerate(free) if f > 0]
        pairs: list[tuple[str, str]] = []
        for cand in urgent_first(candidates, self.urgent_laxity_s):
            if not open_workers:
                break
            sample = self._rng.sample(open_workers, min(self.choices, len(open_workers)))
            index = min(sample, key=lambda i: (running[i], i))
            pairs.append((cand.request_id, workers[index].worker_id))
            free[index] -= 1
            running[index] += 1
            if free[index] == 0:
                open_workers.remove(index)
        return pairs


def _make_bfio(params: dict[str, float]) -> Placer:
    # Imported lazily so that the baselines never pay for numpy.
    from services.router.bfio import BalanceFuturePlacer

    return BalanceFuturePlacer(
        horizon=int(params.get("horizon", 80)),
        urgent_laxity_s=float(params.get("urgent_laxity_s", DEFAULT_URGENT_LAXITY_S)),
        swap_rounds=int(params.get("swap_rounds", 2)),
        levels=int(params.get("levels", 2)),
        refill=bool(params.get("refill", 0.0)),
    )


def _urgent(params: dict[str, float]) -> float:
    return float(params.get("urgent_laxity_s", DEFAULT_URGENT_LAXITY_S))


_FACTORIES: Final[dict[str, Callable[[dict[str, float]], Placer]]] = {
    "least-loaded": lambda p: LeastLoadedPlacer(urgent_laxity_s=_urgent(p)),
    "jsq": lambda p: JoinShortestQueuePlacer(urgent_laxity_s=_urgent(p)),
    "rr": lambda p: RoundRobinPlacer(urgent_laxity_s=_urgent(p)),
    "p2c": lambda p: PowerOfTwoPlacer(
        seed=int(p.get("seed", 0)), choices=int(p.get("choices", 2)), urgent_laxity_s=_urgent(p)
    ),
    "fcfs-fill": lambda p: FcfsFillPlacer(urgent_laxity_s=_urgent(p)),
    "bfio": _make_bfio,
}

PLACER_NAMES: Final = tuple(_FACTORIES)
"""Names accepted by :func:`make_placer`."""


def make_placer(name: str, **params: float) -> Placer:
    """Build a placer by name.

    Args:
        name: one of :data:`PLACER_NAMES` (``"bfio"`` is BF-IO, seed 003).
        **params: policy parameters; all accept ``urgent_laxity_s``; ``p2c`` takes ``seed``
            and ``choices``; ``bfio`` takes ``horizon`` (H steps), ``swap_rounds``,
            ``levels`` and ``refill`` (1 = assume freed slots are refilled inside the window).

    Raises:
        ValueError: for an unknown name.
    """
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ValueError(f"unknown placer {name!r}; choose one of {', '.join(PLACER_NAMES)}")
    return factory(dict(params))
