"""Whole nodes: which servers are powered, where each instance sits, and what idle GPUs draw.

Only a whole node (DynamoLLM's 8-GPU DGX server, ``scenario.nodes.gpus_per_node``) can be
powered off, so a GPU that no instance holds still draws power while its node is on. A
region's inventory of one GPU type fills nodes in order (the last may be partial). Energy of
a powered node over a sample interval is the sum over its GPUs:

* GPUs held by an instance: that instance's engine counter (busy iterations, and idle power
  with the model loaded while it waits, starts or drains), booked by the control loops;
* every other GPU: bare idle power, ``scenario.nodes.bare_idle_share`` × the engine's idle
  power per GPU (DynamoLLM Fig. 3: 550 W bare vs 880 W loaded for 8 H100 → 0.625).

A powered-off node draws nothing. An instance is placed on the fullest powered node that has
room for its TP (best fit, so light load packs onto few nodes); when none has, the first
powered-off node of its region and GPU type boots, which takes ``delays.node_power_on_s`` at
bare idle power before the instance starts loading (``delays.instance_start_s``). A node that
holds no instance at a sample tick powers off, and a scale-in drains the instances of the
emptiest nodes first (:func:`drain_order`), as a cluster manager that consolidates would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadgen.simulator.instance import SimInstance
    from loadgen.simulator.scenario import Scenario

__all__ = ["Node", "NodeFleet", "NodeFullError", "drain_order"]


class NodeFullError(RuntimeError):
    """No node of a region and GPU type has room for an instance (the pools' slots promise
    room, so this is a bug in a caller, never a property of the input)."""


@dataclass(slots=True, eq=False)
class Node:
    """One server: its GPUs, whether it is on, and the instances on it."""

    node_id: str
    region: str
    gpu: str
    gpus: int
    powered: bool = False
    on_since_s: float = 0.0
    ready_s: float = 0.0
    """When its boot ends and an instance may start loading on it."""
    instances: list[SimInstance] = field(default_factory=list)
    departed: list[SimInstance] = field(default_factory=list)
    """Instances that left since the last sample: their GPUs were held part of the interval."""
    held: bool = False
    """Kept on while empty (a re-shard between its old and new instances)."""

    def free_gpus(self) -> int:
        """GPUs no instance holds."""
        return self.gpus - sum(i.gpus for i in self.instances)


def _held_s(instance: SimInstance, from_s: float, to_s: float) -> float:
    """Seconds of ``(from_s, to_s]`` during which ``instance`` held its GPUs."""
    stop = to_s if instance.stopped_s is None else min(to_s, instance.stopped_s)
    return max(0.0, stop - max(from_s, instance.origin_s))


class NodeFleet:
    """Every node of a scenario, their power state and their bare-GPU energy."""

    def __init__(self, scenario: Scenario, loaded_idle_w_per_gpu: Callable[[str], float]) -> None:
        """Lay out the nodes of every region's inventory, all powered off.

        Args:
            scenario: regions, inventory, node size and power-on delay.
            loaded_idle_w_per_gpu: the engine's idle power of one GPU with the model loaded,
                by GPU type (read from the engine, never a constant here).
        """
        size = scenario.nodes.gpus_per_node
        self._share = scenario.nodes.bare_idle_share
        self._power_on_s = scenario.delays.node_power_on_s
        self._loaded_idle = loaded_idle_w_per_gpu
        self._bare_w: dict[str, float] = {}
        self.groups: dict[tuple[str, str], list[Node]] = {}
        for region in scenario.regions:
            for gpu, count in region.gpus.items():
                self.groups[(region.name, gpu)] = [
                    Node(f"{region.name}/{gpu}/n{k}", region.name, gpu, min(size, count - start))
                    for k, start in enumerate(range(0, count, size))
                ]
        self.power_on_events: list[float] = []
        """Times at which a powered-off node was switched on (the initial fleet excluded)."""

    @property
    def nodes(self) -> list[Node]:
        """Every node, region by region."""
        return [n for group in self.groups.values() for n in group]

    def bare_idle_w(self, gpu: str) -> float:
        """Idle power of one GPU of type ``gpu`` on a powered node without a model."""
        if gpu not in self._bare_w:
            self._bare_w[gpu] = self._share * self._loaded_idle(gpu)
        return self._bare_w[gpu]

    def place(self, region: str, gpu: str, tp: int, t_s: float, *, warm: bool) -> Node:
        """Choose the node for a new ``tp``-GPU instance; boot one if none powered has room.

        ``warm`` (the fleet at ``t = 0``) powers a node on at once and counts no event.

        Raises:
            NodeFullError: when no node of ``(region, gpu)`` has ``tp`` free GPUs.
        """
        group = self.groups.get((region, gpu), [])
        fitting = [n for n in group if n.free_gpus() >= tp]
        powered = [n for n in fitting if n.powered]
        if powered:
            return min(powered, key=lambda n: (n.free_gpus(), n.node_id))
        if not fitting:
            raise NodeFullError(f"no {gpu} node in {region} has {tp} free GPUs")
        node = fitting[0]
        node.powered = True
        node.on_since_s = t_s
        node.ready_s = t_s if warm else t_s + self._power_on_s
        if not warm:
            self.power_on_events.append(t_s)
        return node

    @staticmethod
    def attach(node: Node, instance: SimInstance) -> None:
        """Record that ``instance`` holds GPUs of ``node`` from its origin on."""
        node.instances.append(instance)
        instance.node = node

    @staticmethod
    def detach(instance: SimInstance) -> None:
        """Release the GPUs of a stopped instance (its ``stopped_s`` is set)."""
        node = instance.node
        if isinstance(node, Node) and instance in node.instances:
            node.instances.remove(instance)
            node.departed.append(instance)

    def account(self, last_s: float, t_s: float) -> tuple[dict[str, float], float]:
        """Bare-GPU energy per region over ``(last_s, t_s]``, and powered node-seconds.

        Afterwards every node that holds no instance powers off (it drew bare power up to
        ``t_s``: a node is switched off at the sample tick after its last instance left).
        """
        joules: dict[str, float] = {}
        node_s = 0.0
        for node in self.nodes:
            if not node.powered:
                continue
            on_s = max(0.0, t_s - max(last_s, node.on_since_s))
            held = sum(i.gpus * _held_s(i, last_s, t_s) for i in (*node.instances, *node.departed))
            bare_gpu_s = max(0.0, node.gpus * on_s - held)
            joules[node.region] = joules.get(node.region, 0.0) + bare_gpu_s * self.bare_idle_w(
                node.gpu
            )
            node_s += on_s
            node.departed.clear()
            if not node.instances and not node.held:
                node.powered = False
        return joules, node_s

    def powered_count(self) -> int:
        """Nodes that are on (booting included)."""
        return sum(1 for n in self.nodes if n.powered)


def drain_order(instances: Sequence[SimInstance]) -> list[SimInstance]:
    """Instances in the order a scale-in drains them: those on the nodes with the fewest
    other live instances first (so whole nodes empty and can power off), then the fewest
    requests held (the least work left to finish)."""

    def on_node(instance: SimInstance) -> int:
        node = instance.node
        if not isinstance(node, Node):
            return 0
        return sum(1 for i in node.instances if not i.draining)

    return sorted(instances, key=lambda i: (on_node(i), len(i.requests)))
