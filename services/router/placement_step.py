"""One placement round as a pure step: pulled requests and worker loads in, placements out.

The router shell (:mod:`services.router.service`) and the cluster simulator
(:mod:`loadgen.simulator.cluster`) both call :func:`step` for every round, so the live
router and the simulator decide placement by the same code: each side only builds the
snapshot from what it holds (heartbeats and its own in-flight book live; engine state in
the simulator) and carries out the decision (dispatch and re-queue live; engine admission
in the simulator).

A round turns each pulled request into a :class:`~services.router.placement.Candidate`
whose laxity is FREESH Eq. 6 (:func:`shared.domain.laxity.laxity_s`) at the round's time,
and asks the placer, one model at a time (:func:`~services.router.placement.place_by_model`).
The placer is the step's state: the few placers that keep any (round robin's cursor, the
power-of-two RNG) advance it in place, as :class:`~services.dvfs.miad.MiadController` keeps
its target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.router.placement import Candidate, Placer, WorkerLoad, place_by_model
from shared.domain.laxity import laxity_s

__all__ = [
    "PlacementDecision",
    "PlacementRound",
    "Pulled",
    "lookahead_remaining_tokens",
    "step",
]

_MIN_TBT_S = 1e-3
"""Floor of the profiled TBT in the lookahead estimate (a zero profile must not divide)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Pulled:
    """A request the scheduler handed over for this round, as placement sees it."""

    request_id: str
    prompt_tokens: int
    predicted_output_tokens: int
    deadline_s: float
    """t_arr + W_i (FREESH Eq. 6), on the round's clock."""
    remaining_s: float
    """T_remain: the predicted processing time it needs (not started: Lat_i)."""
    model: str = ""
    """The model it asks for; only that model's workers take it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementRound:
    """The snapshot one round decides on."""

    now_s: float
    """The round's time on the deadlines' clock (model time live)."""
    pulled: Sequence[Pulled]
    """In the scheduler's order (its discipline's best first)."""
    workers: Sequence[WorkerLoad]
    """The pool's live workers, in a stable order (ties go to the first)."""


@dataclass(frozen=True, slots=True)
class PlacementDecision:
    """What a round decided."""

    placed: dict[str, str]
    """Request id → worker id, in the order the placer chose them."""
    unplaced: list[str]
    """Ids left out (no room, or no worker of their model), in the pulled order: they go
    back to the queue."""


def step(placer: Placer, round_: PlacementRound) -> PlacementDecision:
    """Decide one round: which pulled request goes to which worker, and which wait.

    Never more placements per worker than its ``free_slots``; each request at most once.
    """
    now = round_.now_s
    candidates = [
        Candidate(
            request_id=p.request_id,
            prompt_tokens=p.prompt_tokens,
            predicted_output_tokens=p.predicted_output_tokens,
            laxity_s=laxity_s(p.deadline_s, p.remaining_s, now),
            model=p.model,
        )
        for p in round_.pulled
    ]
    placed = dict(place_by_model(placer, candidates, round_.workers))
    unplaced = [p.request_id for p in round_.pulled if p.request_id not in placed]
    return PlacementDecision(placed, unplaced)


def lookahead_remaining_tokens(
    predicted_output_tokens: int, placed_s: float, tbt_s: float, now_s: float
) -> int:
    """BF-IO's lookahead input for one running request: its predicted tokens still to come.

    The router sees no token counts, so it takes the predicted length minus the tokens the
    request would have produced at its profiled TBT since it was placed; at least one, as
    a running request holds its slot until its end is heard.
    """
    done = int((now_s - placed_s) / max(tbt_s, _MIN_TBT_S))
    return max(1, predicted_output_tokens - done)
