"""DynamoLLM's ScaleShard baseline: MultiPool plus the tensor-parallel degree as its one knob.

DynamoLLM (seed 001 §5) compares against ScaleShard: MultiPool's static per-class pools, at
maximum clock and with a fixed number of 8-GPU nodes each, that re-shard their nodes between
TP2, TP4 and TP8 as the load changes. The paper gives no internal policy for it (seed 001
§8.4), so this module uses DynamoLLM's own pool level (§2.3) with the clock fixed at maximum:

* **When.** Every ``control.scale_period_s`` (DynamoLLM's 5-min shard-up/down period).
* **Load.** Per class pool, FREESH §2.5 peak QPS in ``demand_bin_s`` bins over steps of one
  period, then the largest of the last ``recent_steps`` steps (the live planner's
  ``recent_max``), read from the pool's own arrivals.
* **Layout.** Each node is one of ``TP8``, ``2TP4`` or ``4TP2`` (Table VI's homogeneous
  layouts). A layout's capacity is ``instances × L̄``; its power at load ``L``, split in
  proportion to capacity, comes from each instance's load curve (:class:`LoadCurve`): the
  calibrated engine's power measured at a few loads up to ``L̄`` and interpolated, as
  DynamoLLM's profile (§3.1). ``L̄`` and the power at ``L̄`` are the live planner's profile
  rows at maximum clock (:func:`services.planner.live_profiles.measure_mode_profiles`), the
  lower points the same measurement at shares of ``L̄`` (:func:`measured_curve`).
  The pool takes the lowest-power layout whose capacity covers ``α × L`` (Eq. 1, simplified
  pool level: f fixed at maximum); when none does, the largest capacity.
* **Gate.** The switch goes through DynamoLLM's overhead gate
  (:func:`services.planner.overhead_gate.reconfiguration_gate`): power saved over the next
  period against the re-shard cost (the node's idle power over the re-shard delay), forced
  when the running layout no longer covers ``α × L``.
* **Re-shard.** One node of a pool at a time (DynamoLLM's staggered reconfiguration, largest
  capacity change first), so the rest of the pool keeps serving. The node's instances stop
  taking requests; requests that have no token yet are aborted on the engine and re-queued in
  the pool (they keep their arrival time); requests already decoding finish there (drain).
  Once the node is empty its GPUs serve nothing for the re-shard delay
  (:func:`reshard_delay_s`: DynamoLLM Table VI in units of τ, plus engine synchronisation),
  drawing idle power, then the new instances take requests. No request is dropped.

The pool's no-queue profile (``Lat`` of FREESH Eq. 6, the E2E SLO bound) stays the TP8
measurement for the whole run, so SLO attainment is judged as for MultiPool.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from loadgen.simulator.cluster_view import ShardActions, ShardView
from loadgen.simulator.demand import ArrivalHistory
from loadgen.simulator.gate import instance_idle_w
from loadgen.simulator.instance import RequestState, SimInstance
from loadgen.simulator.nodes import Node
from loadgen.simulator.shard_layout import (
    NODE_GPUS,
    LoadCurve,
    NodeOption,
    ProfileSource,
    choose_layout,
    layout_power_w,
    measured_curve,
    reshard_delay_s,
    tau_s,
)
from proto.messages import Plan, PoolPlan, RouteWeight
from services.planner.live_profiles import ProfileRequest
from services.planner.overhead_gate import reconfiguration_gate
from services.scheduler.queueing import QueuedRequest
from shared.config import PlannerSettings as LivePlannerSettings
from shared.domain.load_forecast import LoadForecastConfig

if TYPE_CHECKING:
    from loadgen.simulator.pools import Pool

__all__ = ["ShardManager", "ShardSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardSettings:
    """Settings of the ScaleShard pool manager that are not the scenario's or the live planner's."""

    sync_s: float = 2.0
    """Engine synchronisation after the weights moved (assumed: DynamoLLM §4.2 says "a few
    hundred ms to a few seconds" for vLLM, without a number)."""
    layouts: tuple[int, ...] = (8, 4, 2)
    """TP degrees a node may take (one degree per node)."""
    load_fractions: tuple[float, ...] = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2)
    """Profile points below L̄, as shares of it (DynamoLLM §3.1: a few load levels up to
    the maximum throughput). Power is concave in load, so they are denser at low load."""


@dataclass(slots=True)
class _Node:
    """One 8-GPU node of a class pool and the instances its layout runs."""

    pool: Pool
    slot: int
    region: str
    gpu: str
    tp: int
    instances: list[SimInstance]
    target_tp: int = 0
    pending: int = 0
    """New instances that will run once the node's re-shard completes (0: none under way)."""
    record: dict[str, Any] = field(default_factory=dict)
    """The log entry of the re-shard under way."""

    @property
    def busy(self) -> bool:
        return self.target_tp != 0


@dataclass(slots=True)
class _PoolState:
    nodes: list[_Node]
    queued: list[tuple[_Node, int]] = field(default_factory=list)
    """Re-shards decided but not started (one node of a pool re-shards at a time)."""


class ShardManager:
    """The ScaleShard pool manager of one simulation (``scaling = "shard"``).

    It takes the epoch planner's place in :class:`~loadgen.simulator.control.ControlLoops`:
    ``tick`` runs every scale period, ``plan`` is the routing plan the classifier follows,
    ``solves`` is the decision log that becomes the result's ``plans``. What it reads of the
    cluster and does to it are :class:`~loadgen.simulator.cluster_view.ShardView` and
    :class:`~loadgen.simulator.cluster_view.ShardActions`.
    """

    def __init__(
        self,
        view: ShardView,
        actions: ShardActions,
        settings: ShardSettings | None = None,
        profile: ProfileSource | None = None,
    ) -> None:
        """Bind to a cluster whose pools are MultiPool's class pools of 8-GPU slots.

        Raises:
            ValueError: when the policy's pools are not class pools of whole nodes.
        """
        if view.policy.pooling != "class" or view.policy.tp != NODE_GPUS:
            raise ValueError("ScaleShard re-shards whole 8-GPU nodes of class pools (tp = 8)")
        self.view = view
        self.actions = actions
        self.settings = settings or ShardSettings()
        self.live = LivePlannerSettings()
        self.period_s = view.scenario.control.scale_period_s
        bins = max(1, round(self.period_s / self.live.demand_bin_s))
        self.history = ArrivalHistory(
            LoadForecastConfig(bin_s=self.period_s / bins, step_s=self.period_s, steps=1),
            self.live.recent_steps,
        )
        self._profile = profile or self._measured_curve
        self._seen = 0
        self._pools: dict[str, _PoolState] = {}
        self.plan: Plan | None = None
        self.clock_caps: dict[str, float] = {}
        self.solves: list[dict[str, Any]] = []
        self.reshards: list[dict[str, Any]] = []
        """Every completed re-shard: node, TP change, drain and delay (virtual seconds)."""

    # -- inputs ---------------------------------------------------------------------------
    def _measured_curve(self, gpu: str, tp: int, request_class: str) -> LoadCurve | None:
        request = ProfileRequest(
            gpu=gpu,
            tp=tp,
            model=self.view.scenario.model,
            scheme=self.view.scheme.name,
            clock_fractions=(1.0,),
            window_s=self.live.profile_window_s,
            max_num_seqs=self.view.max_num_seqs,
        )
        return measured_curve(request, request_class, self.settings.load_fractions)

    def observe(self, state: RequestState) -> None:
        """Completions are not needed: the pool manager counts its arrivals directly."""

    def _read_arrivals(self) -> None:
        states = self.view.states
        for state in states[self._seen :]:
            if not state.rejected and state.pool:
                self.history.add(state.arrival_s, state.pool)
        self._seen = len(states)

    def demand_qps(self, t_s: float) -> dict[str, float]:
        """Per pool: the largest peak QPS of the last ``recent_steps`` whole periods."""
        steps = max(1, min(self.live.recent_steps, int(t_s // self.period_s)))
        return {
            pool_id: float(peaks.max()) if peaks.size else 0.0
            for pool_id, peaks in self.history.past_peaks(t_s, steps).items()
        }

    def options(self, node: _Node, request_class: str) -> dict[int, NodeOption]:
        """Every layout of ``node`` that can serve ``request_class``, from its load curves."""
        out: dict[int, NodeOption] = {}
        for tp in self.settings.layouts:
            try:
                instance_idle_w(replace(node.pool.config, gpu=node.gpu, tp=tp))
            except ValueError:  # the weights do not fit on this TP
                continue
            curve = self._profile(node.gpu, tp, request_class)
            if curve is not None and curve.max_qps > 0:
                out[tp] = NodeOption(tp=tp, instances=NODE_GPUS // tp, curve=curve)
        return out

    # -- the pool manager -----------------------------------------------------------------
    def tick(self, t_s: float) -> float:
        """Decide each idle pool's layout (from the second period on); return the next tick."""
        if not self._pools:
            self._bind(t_s)
            return t_s + self.period_s
        self._read_arrivals()
        demand = self.demand_qps(t_s)
        for pool_id, state in self._pools.items():
            if any(n.busy for n in state.nodes) or state.queued:
                continue
            pool = state.nodes[0].pool
            assert pool.request_class is not None
            self._decide(pool_id, state, pool.request_class, demand.get(pool_id, 0.0), t_s)
        return t_s + self.period_s

    def _bind(self, t_s: float) -> None:
        for pool in self.view.pools:
            nodes = [
                _Node(pool, int(i.instance_id.rsplit("#", 1)[1]), i.region, i.engine.config.gpu,
                      i.engine.config.tp, [i])
                for i in pool.instances
            ]  # fmt: skip
            self._pools[pool.pool_id] = _PoolState(nodes)
        self._publish(t_s)

    def _decide(
        self, pool_id: str, state: _PoolState, request_class: str, demand: float, t_s: float
    ) -> None:
        nodes = state.nodes
        choices = [self.options(n, request_class) for n in nodes]
        if any(n.tp not in c for n, c in zip(nodes, choices, strict=True)):
            return  # no profile for the running layout: nothing to compare with
        current = [n.tp for n in nodes]
        alpha = self.live.alpha
        target = choose_layout(choices, current, demand, alpha)
        old = [c[n.tp] for n, c in zip(nodes, choices, strict=True)]
        new = [c[tp] for c, tp in zip(choices, target, strict=True)]
        changes = [(n, tp) for n, tp in zip(nodes, target, strict=True) if tp != n.tp]
        # What a re-shard costs in the simulator: the node's idle power while it serves nothing.
        cost = sum(choices[nodes.index(n)][n.tp].idle_w * self._delay(n, tp) for n, tp in changes)
        decision = reconfiguration_gate(
            old_rate=layout_power_w(old, demand),
            new_rate=layout_power_w(new, demand),
            remaining_s=self.period_s,
            transition=cost,
            old_covers_demand=sum(o.capacity_qps for o in old) >= alpha * demand,
            margin=self.live.gate_margin,
        )
        self.solves.append(
            {
                "t_s": t_s,
                "pool": pool_id,
                "peak_demand_qps": demand,
                "tp": current,
                "target_tp": list(target),
                "reshard": bool(changes) and decision.reconfigure,
                "gate": decision.reason,
            }
        )
        if not changes or not decision.reconfigure:
            return

        # Staggered (DynamoLLM §2.3): largest capacity change first, one node at a time.
        def gain(change: tuple[_Node, int]) -> float:
            options = choices[nodes.index(change[0])]
            return abs(options[change[1]].capacity_qps - options[change[0].tp].capacity_qps)

        changes.sort(key=gain, reverse=True)
        state.queued = changes[1:]
        self._begin(*changes[0], t_s)

    def _delay(self, node: _Node, target_tp: int) -> float:
        tau = tau_s(self.view.scenario.model, node.gpu)
        return reshard_delay_s(node.tp, target_tp, tau, self.settings.sync_s)

    # -- one node's re-shard --------------------------------------------------------------
    def _begin(self, node: _Node, target_tp: int, t_s: float) -> None:
        """Stop placing on the node; re-queue its not-yet-started requests; drain the rest."""
        pool = node.pool
        node.target_tp = target_tp
        node.pending = NODE_GPUS // target_tp
        for instance in node.instances:
            if isinstance(instance.node, Node):
                # The server stays on while it re-shards, even once its old instances left.
                instance.node.held = True
        requeued = 0
        for instance in node.instances:
            instance.advance(t_s)
            instance.draining = True
            for state in [s for s in instance.requests.values() if s.tokens == 0]:
                if instance.engine.abort(state.request_id):
                    del instance.requests[state.request_id]
                    state.instance = None
                    pool.queue.push(
                        QueuedRequest(
                            request_id=state.request_id,
                            arrival_s=state.arrival_s,
                            prompt_tokens=state.prompt,
                            predicted_output_tokens=state.predicted,
                            ttft_s=pool.ttft_s,
                            tbt_s=pool.tbt_s,
                            payload=state,
                        )
                    )
                    requeued += 1
        node.record = {
            "node": f"{pool.pool_id}#{node.slot}", "from_tp": node.tp, "to_tp": target_tp,
            "begin_s": t_s, "requeued": requeued,
        }  # fmt: skip
        self.reshards.append(node.record)
        self._publish(t_s)
        self.actions.dispatch(pool, t_s)
        self._drain_check(node, t_s)

    def _drain_check(self, node: _Node, t_s: float) -> None:
        """Run the node's instances to their next finish (nothing can join them) until empty."""
        bound = t_s + self.view.wake_bound_s
        pending = [i for i in node.instances if i.requests]
        if not pending:
            done_s = max([t_s, *(i.now_s for i in node.instances)])
            if done_s > t_s:
                self.actions.schedule_tick(done_s, lambda at_s: self._complete(node, at_s))
            else:
                self._complete(node, t_s)
            return
        next_s = min(max(i.run_to_next_finish(bound), t_s) for i in pending)
        self.actions.schedule_tick(next_s, lambda at_s: self._recheck(node, at_s))

    def _recheck(self, node: _Node, t_s: float) -> bool:
        self._drain_check(node, t_s)
        return False

    def _complete(self, node: _Node, t_s: float) -> bool:
        """The node is empty: retire its instances, start the new layout after the delay."""
        actions = self.actions
        pool = node.pool
        delay = self._delay(node, node.target_tp)
        server = next((i.node for i in node.instances if isinstance(i.node, Node)), None)
        for instance in node.instances:
            if instance in pool.instances:  # the sample tick may have retired it already
                instance.advance(t_s)
                # Charge its energy up to now: from here the same GPUs belong to the new layout.
                actions.settle_energy(instance, t_s)
                actions.retire(instance, t_s)
        if server is None or not server.powered:
            # Not held (no old instance knew its node): boot one.
            server = actions.boot_node(node.region, node.gpu, NODE_GPUS, t_s)
        begin = max(t_s, server.ready_s)
        config = replace(pool.config, gpu=node.gpu, tp=node.target_tp)
        # The same server's GPUs: it stays powered through the re-shard.
        node.instances = [
            actions.start_on_node(
                server,
                pool,
                f"{pool.pool_id}#{node.slot}.tp{node.target_tp}.{k}",
                config,
                start_s=begin,
                ready_s=begin + delay,
            )
            for k in range(node.pending)
        ]
        server.held = False
        delay = begin + delay - t_s
        node.record.update(drained_s=t_s, delay_s=delay, ready_s=t_s + delay)
        actions.schedule_tick(t_s + delay, lambda at_s: self._ready(node, at_s))
        return False

    def _ready(self, node: _Node, t_s: float) -> bool:
        node.tp = node.target_tp
        node.target_tp = 0
        node.pending = 0
        self.actions.count_scale_event()
        self._publish(t_s)
        self.actions.dispatch(node.pool, t_s)
        state = self._pools[node.pool.pool_id]
        if state.queued:
            following, tp = state.queued.pop(0)
            self._begin(following, tp, t_s)
        return False

    # -- routes ---------------------------------------------------------------------------
    def _publish(self, t_s: float) -> None:
        """Each class to its own pool; a pool whose only node re-shards keeps its route, so
        its arrivals wait in its queue for the new instances instead of being refused."""
        pools = []
        routes: dict[str, list[RouteWeight]] = {}
        for pool in self.view.pools:
            state = self._pools[pool.pool_id]
            serving = sum(len(n.instances) for n in state.nodes if not n.busy)
            count = serving + sum(n.pending for n in state.nodes if n.busy)
            pools.append(
                PoolPlan(
                    pool_id=pool.pool_id, region=pool.region, gpu=pool.gpu, tp=pool.config.tp,
                    instances=max(1, count), ttft_ms=pool.ttft_s * 1000.0,
                    tbt_ms=pool.tbt_s * 1000.0,
                )
            )  # fmt: skip
            weight = RouteWeight(pool_id=pool.pool_id, weight=float(max(1, count)))
            # "*" (a class without a pool of its own) goes anywhere, as routing_plan does.
            routes.setdefault("*", []).append(weight)
            if pool.request_class is not None:
                routes.setdefault(pool.request_class, []).append(weight)
        self.plan = Plan(
            epoch=len(self.reshards),
            issued_at=max(t_s, 0.0),
            valid_until=max(t_s, 0.0),
            scheme=self.view.scheme.name,
            pools=pools,
            routes=routes,
        )
        self.actions.update_routes(t_s)
