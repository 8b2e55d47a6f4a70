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
  or dispatches itself;
* :class:`ShardView` and :class:`ShardActions`: DynamoLLM's ScaleShard pool manager, which
  re-shards whole nodes: it retires a node's instances (their energy booked first) and
  starts the new layout's on the same server.

Both fleet planners are a :class:`FleetPlanner` to the control loops and the router.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from loadgen.simulator.carbon import CarbonClock
    from loadgen.simulator.instance import RequestState, SimInstance
    from loadgen.simulator.nodes import Node, NodeFleet
    from loadgen.simulator.policy_set import PolicySet
    from loadgen.simulator.pools import Pool
    from loadgen.simulator.scenario import Scenario
    from loadgen.traces import TraceRequest
    from proto.messages import Plan
    from shared.domain.classes import ClassScheme, ClassSLO
    from shared.engine import EngineConfig

__all__ = [
    "ClusterActions",
    "ClusterView",
    "ControlView",
    "FleetActions",
    "FleetPlanner",
    "InstanceStart",
    "NodeInstanceStart",
    "PlannerView",
    "ShardActions",
    "ShardView",
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


class ShardView(ClusterView, Protocol):
    """What ScaleShard's pool manager reads besides: the requests and the wake bound."""

    @property
    def scheme(self) -> ClassScheme:
        """The request classes."""

    @property
    def states(self) -> Sequence[RequestState]:
        """Every request arrived so far (the manager counts each pool's arrivals)."""

    @property
    def wake_bound_s(self) -> float:
        """The longest an instance runs ahead before a control tick may look at it."""


class FleetPlanner(Protocol):
    """What the control loops and the router use of a fleet planner (the epoch planner or
    ScaleShard's pool manager)."""

    @property
    def plan(self) -> Plan | None:
        """The routing plan the classifier follows (None: route by the live instances)."""

    @property
    def clock_caps(self) -> Mapping[str, float]:
        """Each pool's clock cap in MHz (none: uncapped)."""

    @property
    def solves(self) -> list[dict[str, Any]]:
        """The decision log, the result's ``plans``."""

    def tick(self, t_s: float) -> float:
        """Plan at ``t_s``; return the time of the next tick."""

    def observe(self, state: RequestState) -> None:
        """A completed request."""


class InstanceStart(Protocol):
    """Starts an instance in a pool's first free slot (``warm``: no start delay); None when
    the pool has no free slot."""

    def __call__(self, pool: Pool, t_s: float, *, warm: bool) -> SimInstance | None:
        """Start it at ``t_s``."""


class NodeInstanceStart(Protocol):
    """Starts an instance of ``pool`` on a given server (a re-shard's new layout), taking
    requests from ``ready_s``."""

    def __call__(
        self,
        server: Node,
        pool: Pool,
        instance_id: str,
        config: EngineConfig,
        *,
        start_s: float,
        ready_s: float,
    ) -> SimInstance:
        """Start it: it joins the pool and holds GPUs of ``server``."""


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
    """What the control loops give a fleet planner: the epoch planner's actions, and the
    ones ScaleShard's pool manager takes from the loops (:class:`ShardActions`)."""

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
    settle_energy: Callable[[SimInstance, float], None]
    """Book an instance's energy up to a time, before its GPUs change hands."""


@dataclass(frozen=True, slots=True)
class ShardActions:
    """What ScaleShard's pool manager may do to the cluster."""

    schedule_tick: Callable[[float, Tick], None]
    """Run a tick at a virtual time."""
    dispatch: Callable[[Pool, float], None]
    """Offer a pool's queue to its free slots (a router pull)."""
    retire: Callable[[SimInstance, float], None]
    """Stop an instance: it leaves its pool and frees its GPUs."""
    update_routes: Callable[[float], None]
    """Give the classifier the manager's plan."""
    settle_energy: Callable[[SimInstance, float], None]
    """Book an instance's energy up to a time, before its GPUs change hands."""
    count_scale_event: Callable[[], None]
    """Count a fleet change in the run's ``scale_events``."""
    boot_node: Callable[[str, str, int, float], Node]
    """Power on a server ``(region, gpu, gpus, t_s)`` with a boot delay."""
    start_on_node: NodeInstanceStart
    """Start a new layout's instance on a given server."""
