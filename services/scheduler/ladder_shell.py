"""The scheduler's emergency ladder, live: DynamoLLM §4.4 over each pool's queue.

Every ready period the scheduler views each pool's queued requests (laxity from the
deadline and the predicted remaining time, FREESH Eq. 6) and steps the pure ladder of
:mod:`services.scheduler.emergency` with the pool as the instance. The actions become:

* ``ReorderQueue``: the pool's queue switches to the ladder's discipline (LLF); a no-op
  when it already is (the live default), counted so it shows in metrics.
* ``RequestMaxClock``: a :class:`proto.messages.ClockOverride` on ``dvfs.override.<pool>``
  for ``ladder_clock_hold_s`` model seconds, refreshed while the emergency lasts.
* ``ResteerRequest``: the request moves to another pool's queue (same request, other
  ``pool_id``), to a pool whose workers report free slots and whose wait still meets it.
* ``ShedRequest``: the request ends with ``ErrorReply(code="shed")`` and the ladder's reason
  (only with ``scheduler.ladder_shed``).
* ``ReleaseOverrides``: the normal discipline comes back and the clock override is released.

Re-steer targets come from worker heartbeats (free slots per pool) and the queue ahead
there; the speed ratio from the pools' profiled TBTs seen on their requests. These
estimates are ours; DynamoLLM leaves the detector and thresholds open. The current plan
(followed like every other service, :func:`shared.plan_watch.watch_plan`) limits where a
request may go: a pool whose ``PoolPlan.classes`` is non-empty takes only those classes, so
an input-split plan's groups hold under re-steering too. A pool the plan does not list (or
lists with no classes), a class no pool lists (routed by ``*``), or no plan at all leaves
the target open.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from redis.exceptions import RedisError

from proto.codec import DecodeError, decode, encode
from proto.messages import ClassifiedRequest, ClockOverride, Plan, WorkerStats
from services.scheduler.emergency import (
    EmergencyAction,
    EmergencyConfig,
    EmergencyState,
    InstanceView,
    ReleaseOverrides,
    ReorderQueue,
    RequestMaxClock,
    ResteerRequest,
    Rung,
    ShedRequest,
    SteerTarget,
    WaitingView,
    step,
)
from services.scheduler.queueing import QueueDiscipline, QueuedRequest
from shared.config import SchedulerSettings
from shared.counters import DECISIONS, ERRORS
from shared.lifecycle import ServiceContext
from shared.plan_watch import watch_plan
from shared.replies import reply_error

__all__ = [
    "SHED_CODE",
    "LadderBook",
    "LadderQueues",
    "SchedulerQueues",
    "apply_actions",
    "ladder_config",
    "start_ladder",
]

SHED_CODE = "shed"
ISSUER = "scheduler"
STATS_FRESH_S = 3.0
"""Worker heartbeats older than this (wall s) are ignored as re-steer capacity."""

logger = logging.getLogger(__name__)


class LadderQueues(Protocol):
    """The queue operations the ladder reads and its actions need."""

    def pools(self) -> list[str]:
        """Pools with queued requests."""
        ...

    def queued(self, pool_id: str, now_s: float) -> list[QueuedRequest]:
        """A pool's queued requests, best first."""
        ...

    def take(self, pool_id: str, request_id: str) -> ClassifiedRequest | None:
        """Remove a queued request from a pool; return its message."""
        ...

    def push(self, request: ClassifiedRequest) -> None:
        """Queue a request in its pool."""
        ...

    def use_discipline(self, pool_id: str, name: str | None, now_s: float) -> bool:
        """Switch a pool's queue (None: the normal one); False when nothing changed."""
        ...


class _SchedulerState(Protocol):
    def queue(self, pool_id: str) -> QueueDiscipline: ...
    def backlog(self) -> dict[str, int]: ...
    def push(self, request: ClassifiedRequest) -> None: ...
    def switch_discipline(self, pool_id: str, name: str | None, now_s: float) -> bool: ...


class SchedulerQueues:
    """:class:`LadderQueues` over the scheduler shell's per-pool queues."""

    def __init__(self, state: _SchedulerState) -> None:
        """Wrap the shell's ``SchedulerState``."""
        self._state = state

    def pools(self) -> list[str]:
        """Pools with queued requests."""
        return list(self._state.backlog())

    def queued(self, pool_id: str, now_s: float) -> list[QueuedRequest]:
        """A pool's queued requests, best first."""
        return self._state.queue(pool_id).ordered(now_s)

    def take(self, pool_id: str, request_id: str) -> ClassifiedRequest | None:
        """Remove a queued request from a pool; return its message."""
        item = self._state.queue(pool_id).remove(request_id)
        payload = None if item is None else item.payload
        return payload if isinstance(payload, ClassifiedRequest) else None

    def push(self, request: ClassifiedRequest) -> None:
        """Queue a request in its pool."""
        self._state.push(request)

    def use_discipline(self, pool_id: str, name: str | None, now_s: float) -> bool:
        """Switch a pool's queue discipline (None: the configured one)."""
        return self._state.switch_discipline(pool_id, name, now_s)


@dataclass(slots=True)
class _Pool:
    workers: dict[str, tuple[WorkerStats, float]] = field(default_factory=dict)
    tbt_s: float | None = None
    region: str | None = None


def ladder_config(cfg: SchedulerSettings) -> EmergencyConfig:
    """The pure ladder's thresholds from the scheduler's settings."""
    return EmergencyConfig(
        imminent_laxity_s=cfg.ladder_imminent_laxity_s,
        escalate_after_s=cfg.ladder_escalate_after_s,
        recover_after_s=cfg.ladder_recover_after_s,
        shed_wait_s=cfg.ladder_shed_wait_s,
        reorder_discipline="llf",
    )


class LadderBook:
    """Ladder state per pool and what the scheduler knows of the pools (pure)."""

    def __init__(self, config: EmergencyConfig, *, shed: bool, clock_hold_s: float) -> None:
        """Step with ``config``; drop shed actions unless ``shed``; hold clocks ``clock_hold_s``."""
        self._config = config
        self._shed = shed
        self._hold_s = clock_hold_s
        self._states: dict[str, EmergencyState] = {}
        self._pools: dict[str, _Pool] = {}
        self._clock_until: dict[str, float] = {}
        self._plan_classes: dict[str, frozenset[str]] = {}
        self._planned: frozenset[str] = frozenset()

    def saw_plan(self, plan: Plan) -> None:
        """Follow a new plan: which classes each pool serves (re-steer targets honour it)."""
        self._plan_classes = {p.pool_id: frozenset(p.classes) for p in plan.pools}
        self._planned = frozenset().union(*self._plan_classes.values())

    def _request_class(self, item: QueuedRequest) -> str | None:
        payload = item.payload
        if isinstance(payload, ClassifiedRequest) and payload.request_class in self._planned:
            return payload.request_class
        return None  # no pool lists it: the plan routes it by ``*``, any pool may take it

    def rung(self, pool_id: str) -> Rung:
        """Current rung of a pool."""
        return self._states.get(pool_id, EmergencyState()).rung

    def saw_stats(self, stats: WorkerStats, now_wall_s: float) -> None:
        """Record a worker heartbeat (its pool's free slots)."""
        self._pools.setdefault(stats.pool_id, _Pool()).workers[stats.worker_id] = (
            stats,
            now_wall_s,
        )

    def saw_request(self, request: ClassifiedRequest) -> None:
        """Learn a pool's profiled TBT and region from a request routed to it."""
        pool = self._pools.setdefault(request.pool_id, _Pool())
        pool.tbt_s = request.profile_tbt_ms / 1000.0
        pool.region = request.region

    def region_of(self, pool_id: str) -> str | None:
        """The region of a pool, when a request of it was seen."""
        pool = self._pools.get(pool_id)
        return None if pool is None else pool.region

    def _targets(
        self, pool_id: str, queued: Mapping[str, Sequence[QueuedRequest]], now_wall_s: float
    ) -> list[SteerTarget]:
        here = self._pools.get(pool_id)
        targets: list[SteerTarget] = []
        for other, pool in self._pools.items():
            live = [
                s
                for s, seen in pool.workers.values()
                if now_wall_s - seen <= STATS_FRESH_S and not s.draining
            ]
            if other == pool_id or not live:
                continue
            ahead = queued.get(other, ())
            capacity = sum(s.engine_limit for s in live)
            free = sum(s.free_slots for s in live) - len(ahead)
            ratio = 1.0
            if here is not None and here.tbt_s and pool.tbt_s:
                ratio = pool.tbt_s / here.tbt_s
            targets.append(
                SteerTarget(
                    instance_id=other,
                    pool_id=other,
                    free_slots=max(0, free),
                    expected_wait_s=sum(q.latency_s for q in ahead) / max(1, capacity),
                    speed_ratio=ratio,
                    classes=self._plan_classes.get(other, frozenset()),
                )
            )
        return targets

    def tick(
        self, queues: LadderQueues, now_s: float, now_wall_s: float
    ) -> list[tuple[str, EmergencyAction]]:
        """Step every pool's ladder once; return (pool, action) pairs for the shell."""
        pools = set(queues.pools()) | {p for p, s in self._states.items() if s.rung}
        queued = {p: queues.queued(p, now_s) for p in sorted(pools)}
        out: list[tuple[str, EmergencyAction]] = []
        for items in queued.values():
            if items and isinstance(items[0].payload, ClassifiedRequest):
                self.saw_request(items[0].payload)
        for pool_id, items in queued.items():
            view = InstanceView(
                now_s=now_s,
                instance_id=pool_id,
                pool_id=pool_id,
                requests=[_waiting(q, self._request_class(q)) for q in items],
                targets=self._targets(pool_id, queued, now_wall_s),
            )
            state, actions = step(self._states.get(pool_id, EmergencyState()), view, self._config)
            self._states[pool_id] = state
            for action in actions:
                if isinstance(action, ShedRequest) and not self._shed:
                    continue
                if isinstance(action, RequestMaxClock):
                    self._clock_until[pool_id] = now_s + self._hold_s
                elif isinstance(action, ReleaseOverrides):
                    self._clock_until.pop(pool_id, None)
                out.append((pool_id, action))
            until = self._clock_until.get(pool_id)
            if (
                state.rung >= Rung.MAX_CLOCK
                and until is not None
                and until - now_s < self._hold_s / 2
            ):
                self._clock_until[pool_id] = now_s + self._hold_s
                out.append((pool_id, RequestMaxClock(pool_id)))
        return out

    def clock_override(self, pool_id: str, action: EmergencyAction) -> ClockOverride:
        """The override message for a max-clock request (or its release)."""
        hold = self._hold_s if isinstance(action, RequestMaxClock) else 0.0
        return ClockOverride(
            pool_id=pool_id,
            hold_s=hold,
            issued_by=ISSUER,
            reason="emergency ladder: SLO miss imminent" if hold else "emergency over",
            issued_at=time.time(),
        )


def _waiting(item: QueuedRequest, request_class: str | None) -> WaitingView:
    payload = item.payload
    deadline = payload.deadline_s if isinstance(payload, ClassifiedRequest) else item.arrival_s
    return WaitingView(
        request_id=item.request_id,
        arrival_s=item.arrival_s,
        deadline_s=deadline,
        remaining_s=item.remaining_s,  # FREESH Eq. 6 T_remain; TTFT included (not started)
        request_class=request_class,
    )


async def apply_actions(
    ctx: ServiceContext,
    book: LadderBook,
    queues: LadderQueues,
    actions: Sequence[tuple[str, EmergencyAction]],
    on_ready: Callable[[str], Awaitable[None]] | None = None,
) -> None:
    """Carry out the ladder's actions on the queues, the dvfs agents and the clients.

    A re-steered request's new pool is announced through ``on_ready`` (the scheduler's:
    ``scheduler.ready`` on the bus, or the co-located router's wake-up), by default on
    ``scheduler.ready``.
    """
    now = ctx.clock.now()
    for pool_id, action in actions:
        DECISIONS.labels("ladder", type(action).__name__).inc()
        if isinstance(action, ReorderQueue):
            if queues.use_discipline(pool_id, action.discipline, now):
                logger.warning("pool %s: queue reordered by %s", pool_id, action.discipline)
        elif isinstance(action, RequestMaxClock | ReleaseOverrides):
            if isinstance(action, ReleaseOverrides):
                queues.use_discipline(pool_id, None, now)
            override = book.clock_override(pool_id, action)
            await ctx.nc.publish(ctx.subjects.dvfs_override(pool_id), encode(override))
        elif isinstance(action, ResteerRequest):
            req = queues.take(pool_id, action.request_id)
            if req is None:
                continue
            region = book.region_of(action.to_instance_id) or req.region
            moved = msgspec.structs.replace(req, pool_id=action.to_instance_id, region=region)
            queues.push(moved)
            with contextlib.suppress(RedisError):
                await ctx.redis.hset(ctx.keys.queued, action.request_id, encode(moved))
            if on_ready is not None:
                await on_ready(moved.pool_id)
            else:
                await ctx.nc.publish(ctx.subjects.scheduler_ready(moved.pool_id), b"")
        elif isinstance(action, ShedRequest):
            req = queues.take(pool_id, action.request_id)
            if req is None:
                continue
            # The client's answer first: a shed whose error reply could not be sent stays
            # queued (and served), where deleting it first would leave its client unanswered.
            try:
                await reply_error(
                    ctx.nc,
                    ctx.subjects,
                    service="scheduler",
                    code=SHED_CODE,
                    reason=action.reason,
                    request=req.request,
                )
            except nats.errors.Error as exc:
                queues.push(req)
                ERRORS.labels("scheduler", "shed_unsent").inc()
                logger.warning("could not shed %s (%s); it stays queued", action.request_id, exc)
                continue
            # If this fails, the shed's own request.done deletes the record (forget_ended).
            with contextlib.suppress(RedisError):
                await ctx.redis.hdel(ctx.keys.queued, action.request_id)


async def start_ladder(
    ctx: ServiceContext,
    state: _SchedulerState,
    on_ready: Callable[[str], Awaitable[None]] | None = None,
) -> tuple[LadderBook, list[Subscription], Callable[[], Awaitable[None]]]:
    """Follow heartbeats and the plan; return the book, the subscriptions and the tick.

    ``on_ready(pool)`` announces a pool that received a re-steered request.
    """
    cfg = ctx.settings.scheduler
    book = LadderBook(
        ladder_config(cfg), shed=cfg.ladder_shed, clock_hold_s=cfg.ladder_clock_hold_s
    )
    queues = SchedulerQueues(state)

    async def on_stats(msg: Msg) -> None:
        with contextlib.suppress(DecodeError):
            book.saw_stats(decode(msg.data, WorkerStats), time.time())

    async def tick() -> None:
        actions = book.tick(queues, ctx.clock.now(), time.time())
        if actions:
            await apply_actions(ctx, book, queues, actions, on_ready)

    stats_sub = await ctx.nc.subscribe(ctx.subjects.worker_stats_wildcard, cb=on_stats)
    return book, [stats_sub, await watch_plan(ctx, book.saw_plan)], tick
