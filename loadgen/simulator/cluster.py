"""The discrete-event cluster simulator: arrivals, pools, instances and control loops.

Virtual time only. Arrivals come from the trace in order; a heap holds the other events
(control ticks at their own periods, instance start-up, and "a slot frees" wakes). Engines
advance lazily (:mod:`loadgen.simulator.instance`): an instance is stepped up to ``t`` only
when a decision at ``t`` needs it, which keeps per-event work small. Each request goes
through the production cores: classifier (class, pool, ``Lat``), the pool's queue discipline
and the scheduler's dispatch decision (:func:`services.scheduler.queueing.pop_best`), the
router's placement step (:func:`services.router.placement_step.step`) with the pool's
placer, the engine; clocks through the dvfs controller.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from loadgen.simulator.carbon import CarbonClock
from loadgen.simulator.cluster_view import (
    ClusterActions,
    FleetActions,
    FleetPlanner,
    ShardActions,
)
from loadgen.simulator.control import ControlLoops
from loadgen.simulator.instance import RequestState, SimInstance
from loadgen.simulator.nodes import Node, NodeFleet
from loadgen.simulator.policies import PolicySet
from loadgen.simulator.pools import Pool, build_pools, routing_plan
from loadgen.simulator.results import SimResult, build_result
from loadgen.simulator.scenario import Scenario
from loadgen.simulator.sim_admission import SimAdmission
from loadgen.traces import TraceRequest
from proto.messages import Request
from services.classifier.pipeline import ClassifierCore
from services.classifier.predictors import make_predictor
from services.router import placement_step
from services.router.placement import WorkerLoad
from services.router.placement_step import PlacementRound, Pulled, lookahead_remaining_tokens
from services.scheduler.laxity import remaining_time_s
from services.scheduler.queueing import QueuedRequest, pop_best
from shared.config import ClassifierSettings, WorkerSettings
from shared.domain.classes import default_slos, scheme_by_name
from shared.engine import EngineConfig, create_engine, model_shape
from shared.engine.unloaded import unloaded_latency_s
from shared.errors import RequestRejectedError

__all__ = ["ClusterSimulator", "simulate"]

_WAKE, _READY, _TICK = 0, 1, 2
Progress = Callable[[float], None]


class ClusterSimulator:
    """One run of one policy set over one trace on one scenario."""

    def __init__(
        self,
        scenario: Scenario,
        policy: PolicySet,
        trace: Sequence[TraceRequest],
        *,
        carbon: CarbonClock | None = None,
        record_token_times: bool = False,
        progress: Progress | None = None,
        request_ids: Sequence[str] | None = None,
        carbon_forecast: Callable[[str, float], float] | None = None,
        measure_from_s: float = 0.0,
    ) -> None:
        """Prepare pools, classifier and control loops; nothing runs until :meth:`run`.

        Args:
            scenario: the deployment.
            policy: which core runs each knob.
            trace: arrivals in time order.
            carbon: intensity lookups (default: the scenario's EIA regions).
            record_token_times: keep every token's time (for the largest-gap metric).
            progress: called with the share of the trace simulated so far.
            request_ids: one id per trace entry (default ``r<index>``). The classifier
                routes by a hash of the id, so replaying a live run's ids reproduces its
                pool choices exactly.
            carbon_forecast: the epoch planner's intensity forecast, ``(region, t_s) →
                gCO2/kWh`` (default: the carbon forecaster fitted on the EIA history before
                the scenario's start, issued at each epoch's start hour).
            measure_from_s: start of the measured window: requests arriving earlier, and
                energy, GPU- and node-time before it, warm the run up but are not reported.
        """
        if request_ids is not None and len(request_ids) != len(trace):
            raise ValueError("request_ids must hold one id per trace entry")
        self.request_ids = request_ids
        self.measure_from_s = measure_from_s
        self.carbon_forecast = carbon_forecast
        self.scenario = scenario
        self.policy = policy
        self.trace = trace
        self.record_token_times = record_token_times
        self.progress = progress
        span = (trace[-1].t_s if trace else 0.0) + 3600.0
        self.carbon = carbon or CarbonClock.from_eia(
            [(r.name, r.carbon) for r in scenario.regions], scenario.start_utc, span
        )
        self.scheme = scheme_by_name(scenario.slo.scheme)
        self.slos = default_slos(self.scheme)
        shares = None
        if policy.pooling == "class":
            from loadgen.simulator.multipool import class_token_shares

            shares = class_token_shares(trace, self.scheme)
        self.pools = build_pools(scenario, policy, shares)
        self.nodes = NodeFleet(scenario, self._loaded_idle_w_per_gpu)
        self.pool_by_id = {p.pool_id: p for p in self.pools}
        self.max_num_seqs = scenario.engine.max_num_seqs
        live = ClassifierSettings()
        self.classifier = ClassifierCore(
            scheme=self.scheme,
            slos=self.slos,
            predictor=make_predictor(
                policy.predictor, scheme=self.scheme, model_dir=None, **policy.predictor_params
            ),
            models=[scenario.model],
            # The live classifier refuses what the model cannot hold (vLLM's max_model_len).
            max_context_tokens=min(
                scenario.slo.max_context_tokens, model_shape(scenario.model).max_context
            ),
            alpha_llf=scenario.slo.alpha_llf,
            default_ttft_ms=live.default_ttft_ms,
            default_tbt_ms=live.default_tbt_ms,
        )
        self.bfio = policy.placer == "bfio"
        self.stats_view = policy.router_view == "stats"
        self.admission: SimAdmission | None = None
        """The live worker's admission gate (``policy.worker_admission``); None: no gate."""
        if policy.worker_admission:
            self.admission = SimAdmission(
                deadline_lat=policy.admission_deadline_lat or scenario.slo.alpha_llf,
                hold_s=WorkerSettings().admission_hold_s,
            )
        self.states: list[RequestState] = []
        self.outstanding = 0
        self.retired: list[SimInstance] = []
        self.now_s = 0.0
        self._heap: list[tuple[float, int, int, object]] = []
        self._seq = itertools.count()
        actions = ClusterActions(
            schedule_tick=self.schedule_tick,
            start_instance=self.start_instance,
            retire=self.retire,
            dispatch=self.dispatch,
            update_routes=self.update_routes,
            resteer_orphans=self.resteer_orphans,
        )
        self.control = ControlLoops(self, actions, self._fleet_planner)

    def _fleet_planner(self, actions: FleetActions) -> FleetPlanner | None:
        """The policy's fleet planner: the epoch planner, DynamoLLM's ScaleShard pool manager
        (in the epoch planner's place), or None."""
        if self.policy.scaling == "planned":
            from loadgen.simulator.planned import EpochPlanner
            from services.planner.problem import Objective

            return EpochPlanner(self, actions, Objective(self.policy.objective))
        if self.policy.scaling == "shard":
            from loadgen.simulator.scaleshard import ShardManager

            return ShardManager(
                self,
                ShardActions(
                    schedule_tick=actions.schedule_tick,
                    dispatch=self.dispatch,
                    retire=self.retire,
                    update_routes=actions.update_routes,
                    settle_energy=actions.settle_energy,
                    count_scale_event=actions.count_scale_event,
                    boot_node=self.boot_node,
                    start_on_node=self.start_on_node,
                ),
            )
        return None

    # -- events -------------------------------------------------------------------------
    def schedule(self, t_s: float, kind: int, payload: object) -> None:
        """Push an event; ties keep insertion order, so runs are deterministic."""
        heapq.heappush(self._heap, (t_s, next(self._seq), kind, payload))

    def run(self) -> SimResult:
        """Simulate until every request has completed or been rejected."""
        self.control.start()
        trace = self.trace
        heap = self._heap
        index, total = 0, len(trace)
        while True:
            next_arrival = trace[index].t_s if index < total else float("inf")
            if heap and heap[0][0] <= next_arrival:
                t_s, _, kind, payload = heapq.heappop(heap)
                self.now_s = t_s
                if kind == _WAKE:
                    assert isinstance(payload, SimInstance)
                    payload.wake_pending = False
                    self.dispatch(self.pool_by_id[payload.pool_id], t_s)
                elif kind == _READY:
                    assert isinstance(payload, SimInstance)
                    self.update_routes(t_s)
                    self.dispatch(self.pool_by_id[payload.pool_id], t_s)
                else:
                    assert callable(payload)
                    if payload(t_s) and index >= total and self.outstanding == 0:
                        break
            elif index < total:
                self.now_s = next_arrival
                self.arrive(index, trace[index])
                index += 1
            else:
                break
        return build_result(self, self.control)

    # -- requests -----------------------------------------------------------------------
    def arrive(self, index: int, item: TraceRequest) -> None:
        """Classify one arrival and queue it in its pool (or reject it)."""
        t_s = item.t_s
        state = RequestState(index, t_s, item.prompt_tokens, item.output_tokens)
        if self.request_ids is not None:
            state.request_id = self.request_ids[index]
        if self.record_token_times:
            state.token_times = []
        self.states.append(state)
        if item.prompt_tokens < 1 or item.output_tokens < 1:
            self._reject(state, "bad_lengths")
            return
        request = Request(
            request_id=state.request_id,
            model=self.scenario.model,
            reply_subject="sim",
            sent_at=t_s,
            max_tokens=item.output_tokens,
            prompt_tokens=item.prompt_tokens,
            ignore_eos=True,
        )
        try:
            classified = self.classifier.classify(request, arrival_s=t_s, now_wall=t_s)
        except RequestRejectedError as error:
            self._reject(state, error.code)
            return
        pool = self.staffed(self.pool_by_id[classified.pool_id], t_s)
        state.predicted = classified.predicted_output_tokens
        state.request_class = classified.request_class
        state.pool = pool.pool_id
        state.lat_s = classified.lat_s
        # Judged on the request's true lengths, as every policy is: a predictor's guess must
        # not move the SLO a policy is measured against (only how it serves the request).
        # The E2E yardstick is the request alone on an idle instance of its pool's
        # configuration (placement re-measures it on the instance that serves it), never a
        # policy's own profile of the pool.
        state.judged_class = self.scheme.classify(item.prompt_tokens, item.output_tokens)
        with contextlib.suppress(ValueError):
            # A request no instance of the pool can ever hold is refused at placement and,
            # like every refused request, carries no bound.
            state.judged_lat_s = unloaded_latency_s(
                pool.config, item.prompt_tokens, item.output_tokens
            )
        state.ttft_profile_s = pool.ttft_s
        state.tbt_profile_s = pool.tbt_s
        self.outstanding += 1
        self.control.on_arrival(t_s)
        pool.queue.push(
            QueuedRequest(
                request_id=state.request_id,
                arrival_s=t_s,
                prompt_tokens=state.prompt,
                predicted_output_tokens=state.predicted,
                ttft_s=pool.ttft_s,
                tbt_s=pool.tbt_s,
                payload=state,
            )
        )
        self.dispatch(pool, t_s)

    def on_finish(self, instance: SimInstance, state: RequestState, t_s: float) -> None:
        """A request produced its last token at ``t_s``."""
        self.outstanding -= 1
        instance.gate_until = -1.0  # a request ended: the admission gate opens
        self.classifier.observe(state.prompt, state.output)
        self.control.on_finish(state)

    def dispatch(self, pool: Pool, t_s: float) -> None:
        """Offer queued requests to the placer for the pool's free slots (router pull)."""
        queue = pool.queue
        if not len(queue):
            return
        ready = [i for i in pool.instances if not i.draining and i.ready_s <= t_s]
        for instance in ready:
            instance.advance(t_s)
        cap = self.max_num_seqs
        open_instances = [i for i in ready if i.free_slots(cap) > 0 and i.gate_until <= t_s]
        capacity = sum(i.free_slots(cap) for i in open_instances)
        if capacity > 0:
            self._place(pool, open_instances, capacity, t_s)
        if len(queue):
            self._schedule_wakes(ready, t_s)

    def _place(self, pool: Pool, instances: list[SimInstance], capacity: int, t_s: float) -> None:
        """One router round on the pool: the scheduler's and the router's own steps."""
        queue = pool.queue
        taken = pop_best(queue, capacity, t_s)
        window = self.scenario.slo.alpha_llf
        pulled = [
            Pulled(
                request_id=q.request_id,
                prompt_tokens=q.prompt_tokens,
                predicted_output_tokens=q.predicted_output_tokens,
                deadline_s=q.arrival_s + window * q.latency_s,
                remaining_s=remaining_time_s(q.predicted_output_tokens, 0, q.ttft_s, q.tbt_s),
            )
            for q in taken
        ]
        block = pool.config.block_size
        loads = [
            WorkerLoad(
                worker_id=i.instance_id,
                free_slots=i.free_slots(self.max_num_seqs),
                running=len(i.requests),
                kv_tokens=(i.kv_seen if self.stats_view else i.engine.kv_blocks_used) * block,
                predicted_remaining=_predicted_remaining(i, t_s) if self.bfio else (),
            )
            for i in instances
        ]
        by_id = {i.instance_id: i for i in instances}
        decision = placement_step.step(
            pool.placer, PlacementRound(now_s=t_s, pulled=pulled, workers=loads)
        )
        placed = decision.placed
        # Acted on in the pulled order (each unplaced one goes back to the queue as it comes).
        for item in taken:
            worker = placed.get(item.request_id)
            if worker is None:
                queue.push(item)
                continue
            state = item.payload
            assert isinstance(state, RequestState)
            target = by_id[worker]
            if self.admission is not None and not self.admission.admits(target, state, t_s):
                queue.push(item)
                continue
            try:
                target.add(state, t_s)
            except ValueError:
                # Prompt plus output can never fit this engine's KV cache (the worker's
                # error reply in the live stack).
                self._reject(state, "kv_cache")
                self.outstanding -= 1

    @staticmethod
    def _reject(state: RequestState, reason: str) -> None:
        state.rejected = True
        state.reject_reason = reason

    def _schedule_wakes(self, instances: list[SimInstance], t_s: float) -> None:
        bound = t_s + self.control.wake_bound_s
        for instance in instances:
            closed = instance.gate_until > t_s
            full = instance.free_slots(self.max_num_seqs) <= 0
            if not instance.wake_pending and (full or closed):
                instance.wake_pending = True
                # A closed gate opens at a finish there or when its hold ends, if earlier.
                until = min(bound, instance.gate_until) if closed else bound
                self.schedule(max(instance.run_to_next_finish(until), t_s), _WAKE, instance)

    # -- instances ----------------------------------------------------------------------
    def start_instance(self, pool: Pool, t_s: float, *, warm: bool) -> SimInstance | None:
        """Start an instance in the pool's first free slot; ``warm`` skips the start delay."""
        used = {int(i.instance_id.rsplit("#", 1)[1]) for i in pool.instances}
        slot = next((k for k in range(pool.max_instances) if k not in used), None)
        if slot is None:
            return None
        region, gpu = pool.slots[slot]
        delay = 0.0 if warm else self.scenario.delays.instance_start_s
        config = pool.config if gpu == pool.config.gpu else _with_gpu(pool, gpu)
        node = self.nodes.place(region, gpu, config.tp, t_s, warm=warm)
        # On a node that is still booting, the instance starts loading once the boot ends.
        begin = max(t_s, node.ready_s)
        instance = SimInstance(
            f"{pool.pool_id}#{slot}",
            pool_id=pool.pool_id,
            region=region,
            config=config,
            start_s=begin,
            ready_s=begin + delay,
            on_finish=self.on_finish,
        )
        self.nodes.attach(node, instance)
        pool.instances.append(instance)
        if instance.ready_s > t_s:
            self.schedule(instance.ready_s, _READY, instance)
        return instance

    def boot_node(self, region: str, gpu: str, gpus: int, t_s: float) -> Node:
        """Power on a server for ``gpus`` GPUs of type ``gpu`` in ``region`` (boot delay)."""
        return self.nodes.place(region, gpu, gpus, t_s, warm=False)

    def start_on_node(
        self,
        server: Node,
        pool: Pool,
        instance_id: str,
        config: EngineConfig,
        *,
        start_s: float,
        ready_s: float,
    ) -> SimInstance:
        """Start an instance of ``pool`` on ``server`` (a re-shard's new layout, which the
        re-shard's own tick makes ready: no start-up event)."""
        instance = SimInstance(
            instance_id,
            pool_id=pool.pool_id,
            region=server.region,
            config=config,
            start_s=start_s,
            ready_s=ready_s,
            on_finish=self.on_finish,
        )
        pool.instances.append(instance)
        self.nodes.attach(server, instance)
        return instance

    @property
    def wake_bound_s(self) -> float:
        """The longest an instance runs ahead before a control tick may look at it."""
        return self.control.wake_bound_s

    def retire(self, instance: SimInstance, t_s: float) -> None:
        """Stop an instance at ``t_s``: it leaves its pool and frees its node's GPUs."""
        pool = self.pool_by_id[instance.pool_id]
        if instance in pool.instances:
            pool.instances.remove(instance)
        instance.stopped_s = t_s
        self.retired.append(instance)
        self.nodes.detach(instance)

    def _loaded_idle_w_per_gpu(self, gpu: str) -> float:
        """The engine's idle power of one GPU of type ``gpu`` holding the scenario's model."""
        engine_args = self.scenario.engine
        for tp in (1, 2, 4, 8):
            config = EngineConfig(
                gpu=gpu,
                model=self.scenario.model,
                tp=tp,
                max_num_seqs=engine_args.max_num_seqs,
                max_num_batched_tokens=engine_args.max_num_batched_tokens,
            )
            try:
                engine: Any = create_engine(config)
            except ValueError:  # the weights do not fit on this TP: try a wider one
                continue
            return float(engine.idle_power_w) / tp
        raise ValueError(f"{self.scenario.model} fits on no TP of {gpu}")

    def routing_weights(self) -> dict[str, float]:
        """Route each pool in proportion to its live, ready instances."""
        now = self.now_s
        ready = {p.pool_id: float(sum(1 for i in p.live() if i.ready_s <= now)) for p in self.pools}
        if any(ready.values()):
            return ready
        # Every live instance is still starting: queue where they will come up.
        return {p.pool_id: float(len(p.live())) for p in self.pools}

    def staffed(self, pool: Pool, t_s: float) -> Pool:
        """``pool``, or, when every instance of it drains (a TP-mode switch freed its GPUs
        before the plan's routes moved), the best-staffed pool of its class group
        (:func:`_best_staffed`), so no arrival waits for a pool nobody will serve again."""
        if pool.live():
            return pool
        same = [p for p in self.pools if p.class_group in (None, pool.class_group)]
        return _best_staffed(same, t_s) or _best_staffed(self.pools, t_s) or pool

    def resteer_orphans(self, t_s: float) -> None:
        """Move the queue of a pool left without live instances to the best-staffed pool."""
        target = _best_staffed(self.pools, t_s)
        if target is None:
            return
        for pool in self.pools:
            if pool.live() or not len(pool.queue):
                continue
            while (item := pool.queue.pop(t_s)) is not None:
                state = item.payload
                assert isinstance(state, RequestState)
                state.pool = target.pool_id
                target.queue.push(item)
            self.dispatch(target, t_s)

    def update_routes(self, t_s: float) -> None:
        """Give the classifier a plan that matches the live instances."""
        planner = self.control.planner
        if planner is not None and planner.plan is not None:
            self.classifier.update_plan(planner.plan)
            return
        plan = routing_plan(self.pools, self.routing_weights(), self.scheme.name, t_s)
        self.classifier.update_plan(plan)

    def schedule_tick(self, t_s: float, tick: Callable[[float], bool]) -> None:
        """Register a control tick; it returns True when the run may end after it."""
        self.schedule(t_s, _TICK, tick)


def _best_staffed(pools: Sequence[Pool], t_s: float) -> Pool | None:
    """The pool with the most live instances ready at ``t_s``, then the most live ones (the
    first on a tie); None when none has a live instance.

    Ready ones first: a pool whose only instance is still starting (on a node that may be
    booting too, 33 + 90 s here) leaves every request sent to it waiting that long, where
    a pool that serves now meets it. On the code trace a re-plan drained the short group's
    pool and a tie on live instances sent 41 requests to a booting one (120 s waits).
    """
    staffed = [p for p in pools if p.live()]
    if not staffed:
        return None

    def rank(pool: Pool) -> tuple[int, int]:
        live = pool.live()
        return sum(1 for i in live if i.ready_s <= t_s), len(live)

    return max(staffed, key=rank)


def _predicted_remaining(instance: SimInstance, t_s: float) -> tuple[int, ...]:
    """BF-IO's lookahead input, estimated as the live router does (``registry.loads``)."""
    return tuple(
        lookahead_remaining_tokens(s.predicted, s.placed_s, s.tbt_profile_s, t_s)
        for s in instance.requests.values()
    )


def _with_gpu(pool: Pool, gpu: str) -> EngineConfig:
    return replace(pool.config, gpu=gpu)


def simulate(
    scenario: Scenario,
    policy: PolicySet,
    trace: Sequence[TraceRequest],
    *,
    record_token_times: bool = False,
    progress: Progress | None = None,
    request_ids: Sequence[str] | None = None,
    measure_from_s: float = 0.0,
) -> SimResult:
    """Run one policy set over ``trace`` on ``scenario`` and return its result.

    ``measure_from_s``: requests arriving earlier (and energy before it) warm the run up
    and are left out of the result.
    """
    started = time.perf_counter()
    result = ClusterSimulator(
        scenario,
        policy,
        trace,
        record_token_times=record_token_times,
        progress=progress,
        request_ids=request_ids,
        measure_from_s=measure_from_s,
    ).run()
    result.wall_s = time.perf_counter() - started
    return result
