"""What the simulator's controllers may read of the cluster, and what they may do to it.

The control loops (:mod:`loadgen.simulator.control`) and the epoch planner
(:mod:`loadgen.simulator.planned`) are shells around pure steps, like the live services'
(docs/architecture.md, "One step per control loop"). Each gets, at construction, a
read-only view (a :class:`~typing.Protocol` the :class:`~loadgen.simulator.cluster.
ClusterSimulator` satisfies) and a frozen set of actions, so what a controller depends on is
written down here rather than spread over its body:

* :class:`ControlView` and :class:`ClusterActions`: the clock, scaling and sampling ticks;
* :class:`PlannerView` and :class:`FleetActions`: the epoch planner, which starts instances
  through the control loops (so each gets the policy's clock controller) and never retires
  or dispatches itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:
    from loadgen.simulator.carbon import CarbonClock
    from loadgen.simulator.instance import RequestState, SimInstance
    from loadgen.simulator.nodes import NodeFleet
    from loadgen.simulator.policy_set import PolicySet
    from loadgen.simulator.pools import Pool
    from loadgen.simulator.scenario import Scenario
    from loadgen.traces import TraceRequest
    from shared.domain.classes import ClassScheme, ClassSLO

__all__ = [
    "ClusterActions",
    "ClusterView",
    "ControlView",
    "FleetActions",
    "InstanceStart",
    "PlannerView",
    "Tick",
]

Tick: TypeAlias = Callable[[float], bool]
"""A control tick at a virtual time; it returns True when the run may end after it."""


class ClusterView(Protocol):
    """What every controller reads: the run's settings, its pools and nodes (live objects
    whose instances change; a controller changes them only through its actions or by
    marking instances ``draining``)."""

    @property
    def scenario(self) -> Scenario:
        """The deployment."""

    @property
    def policy(self) -> PolicySet:
        """Which core runs each knob."""

    @property
    def pools(self) -> Sequence[Pool]:
        """Every pool, in the simulator's order."""

    @property
    def pool_by_id(self) -> Mapping[str, Pool]:
        """The pools by id."""

    @property
    def nodes(self) -> NodeFleet:
        """The servers the pools' instances run on."""

    @property
    def slos(self) -> Mapping[str, ClassSLO]:
        """Each class's TTFT/TBT SLO."""

    @property
    def max_num_seqs(self) -> int:
        """An instance's request slots."""


class ControlView(ClusterView, Protocol):
    """What the control loops read besides: the trace, progress and the accounting inputs."""

    @property
    def scheme(self) -> ClassScheme:
        """The request classes."""

    @property
    def trace(self) -> Sequence[TraceRequest]:
        """Arrivals in time order."""

    @property
    def states(self) -> Sequence[RequestState]:
        """Every request arrived so far."""

    @property
    def outstanding(self) -> int:
        """Requests classified and not yet finished."""

    @property
    def progress(self) -> Callable[[float], None] | None:
        """Told the share of the trace simulated so far."""

    @property
    def carbon(self) -> CarbonClock:
        """Each region's intensity (hourly) and its forecast."""

    @property
    def measure_from_s(self) -> float:
        """Start of the measured window (earlier energy warms up, uncounted)."""


class PlannerView(ClusterView, Protocol):
    """What the epoch planner reads besides: the time, and a given carbon forecast."""

    @property
    def now_s(self) -> float:
        """The simulator's virtual time."""

    @property
    def carbon_forecast(self) -> Callable[[str, float], float] | None:
        """The intensity forecast ``(region, t_s) → gCO2/kWh``, when the run is given one."""


class InstanceStart(Protocol):
    """Starts an instance in a pool's first free slot (``warm``: no start delay); None when
    the pool has no free slot."""

    def __call__(self, pool: Pool, t_s: float, *, warm: bool) -> SimInstance | None:
        """Start it at ``t_s``."""


@dataclass(frozen=True, slots=True)
class ClusterActions:
    """What the control loops may do to the cluster."""

    schedule_tick: Callable[[float, Tick], None]
    """Run a tick at a virtual time."""
    start_instance: InstanceStart
    """Start an instance (the control loops give it its clock controller)."""
    retire: Callable[[SimInstance, float], None]
    """Stop an instance: it leaves its pool and frees its GPUs."""
    dispatch: Callable[[Pool, float], None]
    """Offer a pool's queue to its free slots (a router pull)."""
    update_routes: Callable[[float], None]
    """Give the classifier routes that match the live instances (or the plan)."""
    resteer_orphans: Callable[[float], None]
    """Move the queue of a pool without live instances to the best-staffed pool."""


@dataclass(frozen=True, slots=True)
class FleetActions:
    """What the epoch planner may do to the cluster."""

    schedule_tick: Callable[[float, Tick], None]
    """Run a tick at a virtual time."""
    start_instance: Callable[[Pool, float], SimInstance | None]
    """Start a cold instance with the policy's clock controller (the control loops')."""
    update_routes: Callable[[float], None]
    """Give the classifier the plan in force."""
    resteer_orphans: Callable[[float], None]
    """Move the queue of a pool without live instances to the best-staffed pool."""
    count_scale_event: Callable[[], None]
    """Count a fleet change in the run's ``scale_events``."""
