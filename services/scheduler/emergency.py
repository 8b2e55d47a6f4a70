"""DynamoLLM's emergency ladder (§4.4) as a pure state machine.

When an SLO miss is imminent on an instance (some waiting request's laxity against its SLO
deadline falls below a threshold), escalate one rung at a time, giving each rung
``escalate_after_s`` to work before the next:

1. REORDER: serve requests closest to their deadline first (switch the queue to LLF/EDF).
2. MAX_CLOCK: ask the dvfs agent for the instance's maximum GPU clock.
3. RESTEER: move at-risk requests that have not started to an instance with room to
   meet their deadline (same pool first, then others the caller offers), and only to one
   whose plan serves the request's class (a plan may split classes into exclusive groups:
   a short request re-steered among long prefills misses its SLO anyway).
4. SHED: squash at-risk requests that have waited longer than ``shed_wait_s`` and could
   not be re-steered, with a reason the client can read (it may retry elsewhere).

Rungs are cumulative: at RESTEER and SHED, re-steering is attempted every tick. After
``recover_after_s`` with nothing at risk the ladder returns to NORMAL and releases the
clock and queue overrides. DynamoLLM leaves the detector and thresholds open; they are
named settings here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import IntEnum

from shared.domain.laxity import laxity_s

__all__ = [
    "EmergencyAction",
    "EmergencyConfig",
    "EmergencyState",
    "InstanceView",
    "ReleaseOverrides",
    "ReorderQueue",
    "RequestMaxClock",
    "ResteerRequest",
    "Rung",
    "ShedRequest",
    "SteerTarget",
    "WaitingView",
    "step",
]


class Rung(IntEnum):
    """Ladder position, in escalation order."""

    NORMAL = 0
    REORDER = 1
    MAX_CLOCK = 2
    RESTEER = 3
    SHED = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class EmergencyConfig:
    """Thresholds of the ladder (DynamoLLM leaves them unspecified)."""

    imminent_laxity_s: float = 0.5
    """A request is at risk when its laxity (:func:`shared.domain.laxity.laxity_s`:
    deadline − now − remaining work) is below this."""
    escalate_after_s: float = 2.0
    """Time a rung gets to relieve the risk before the next rung (clock changes need ~1 s)."""
    recover_after_s: float = 10.0
    """Risk-free time before stepping back to NORMAL."""
    shed_wait_s: float = 30.0
    """Only requests that have waited at least this long are shed."""
    reorder_discipline: str = "llf"
    """Discipline to switch the queue to on REORDER."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitingView:
    """What the ladder needs to know about one queued or running request."""

    request_id: str
    arrival_s: float
    deadline_s: float
    """SLO deadline (e.g. arrival + 5·Lat, FREESH Eq. 10)."""
    remaining_s: float
    """Predicted service time still needed on this instance."""
    started: bool = False
    """Whether it already produced tokens here (started requests are never re-steered)."""
    request_class: str | None = None
    """Its class, when the plan restricts which pools serve it (None: any target will do)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SteerTarget:
    """Another instance that could take re-steered requests."""

    instance_id: str
    pool_id: str
    free_slots: int
    expected_wait_s: float
    """Queueing delay a new request would see there."""
    speed_ratio: float = 1.0
    """Service-time multiplier there relative to here (< 1 is faster)."""
    classes: frozenset[str] = frozenset()
    """Request classes the plan gives this target (empty: it takes any class)."""

    def serves(self, request_class: str | None) -> bool:
        """Whether the plan lets this target take a request of ``request_class``."""
        return not self.classes or request_class is None or request_class in self.classes


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceView:
    """One instance at one tick."""

    now_s: float
    instance_id: str
    pool_id: str
    requests: Sequence[WaitingView]
    targets: Sequence[SteerTarget] = ()


@dataclass(frozen=True, slots=True)
class ReorderQueue:
    """Switch this instance's queue to a deadline-first discipline."""

    instance_id: str
    discipline: str


@dataclass(frozen=True, slots=True)
class RequestMaxClock:
    """Ask the dvfs agent to pin this instance at its maximum clock."""

    instance_id: str


@dataclass(frozen=True, slots=True)
class ResteerRequest:
    """Move a request that has not started to another instance."""

    request_id: str
    from_instance_id: str
    to_instance_id: str


@dataclass(frozen=True, slots=True)
class ShedRequest:
    """Reject a request with a reason the client can act on."""

    request_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class ReleaseOverrides:
    """Emergency over: restore the normal discipline and release the clock pin."""

    instance_id: str


EmergencyAction = ReorderQueue | RequestMaxClock | ResteerRequest | ShedRequest | ReleaseOverrides


@dataclass(frozen=True, slots=True)
class EmergencyState:
    """Ladder state of one instance (start with ``EmergencyState()``)."""

    rung: Rung = Rung.NORMAL
    rung_since_s: float = 0.0
    calm_since_s: float | None = None


def _laxity(request: WaitingView, now_s: float) -> float:
    return laxity_s(request.deadline_s, request.remaining_s, now_s)


def _resteer(
    view: InstanceView, at_risk: list[WaitingView]
) -> tuple[list[EmergencyAction], set[str]]:
    free = {t.instance_id: t.free_slots for t in view.targets}
    # Same pool first (DynamoLLM re-steers within the pool), then the shortest wait.
    order = sorted(view.targets, key=lambda t: (t.pool_id != view.pool_id, t.expected_wait_s))
    actions: list[EmergencyAction] = []
    moved: set[str] = set()
    for request in sorted(at_risk, key=lambda r: _laxity(r, view.now_s)):
        if request.started:
            continue
        for target in order:
            if not target.serves(request.request_class):
                continue
            finish = view.now_s + target.expected_wait_s + request.remaining_s * target.speed_ratio
            if free[target.instance_id] > 0 and finish < request.deadline_s:
                free[target.instance_id] -= 1
                actions.append(
                    ResteerRequest(request.request_id, view.instance_id, target.instance_id)
                )
                moved.add(request.request_id)
                break
    return actions, moved


def _shed(
    view: InstanceView, at_risk: list[WaitingView], moved: set[str], config: EmergencyConfig
) -> list[EmergencyAction]:
    actions: list[EmergencyAction] = []
    for request in at_risk:
        waited = view.now_s - request.arrival_s
        if request.request_id in moved or request.started or waited < config.shed_wait_s:
            continue
        reason = (
            f"slo_unmeetable: waited {waited:.1f} s, laxity {_laxity(request, view.now_s):.1f} s "
            f"after reorder, max clock and re-steer on instance {view.instance_id}; retry later "
            "or on another pool"
        )
        actions.append(ShedRequest(request.request_id, reason))
    return actions


def step(
    state: EmergencyState, view: InstanceView, config: EmergencyConfig
) -> tuple[EmergencyState, list[EmergencyAction]]:
    """Advance the ladder by one tick.

    Args:
        state: the instance's ladder state after the previous tick.
        view: the instance's requests and possible re-steer targets now.
        config: thresholds.

    Returns:
        The new state and the actions for the shell to carry out, in order.
    """
    now = view.now_s
    at_risk = [r for r in view.requests if _laxity(r, now) < config.imminent_laxity_s]
    if not at_risk:
        if state.rung is Rung.NORMAL:
            return state, []
        calm_since = now if state.calm_since_s is None else state.calm_since_s
        if now - calm_since >= config.recover_after_s:
            return EmergencyState(Rung.NORMAL, now, None), [ReleaseOverrides(view.instance_id)]
        return replace(state, calm_since_s=calm_since), []
    rung, since = state.rung, state.rung_since_s
    actions: list[EmergencyAction] = []
    if rung is Rung.NORMAL or (rung < Rung.SHED and now - since >= config.escalate_after_s):
        rung, since = Rung(rung + 1), now
        if rung is Rung.REORDER:
            actions.append(ReorderQueue(view.instance_id, config.reorder_discipline))
        elif rung is Rung.MAX_CLOCK:
            actions.append(RequestMaxClock(view.instance_id))
    if rung >= Rung.RESTEER:
        steered, moved = _resteer(view, at_risk)
        actions.extend(steered)
        if rung is Rung.SHED:
            actions.extend(_shed(view, at_risk, moved, config))
    return EmergencyState(rung, since, None), actions
