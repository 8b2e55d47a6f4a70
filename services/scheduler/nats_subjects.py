"""The scheduler's hand-offs served on NATS: submit, pull, requeue, and every client's cancels.

The separate-process scheduler serves all of them (queue group ``scheduler``, so replicas
share the work); the co-located request path calls submit and pull as methods and serves
only ``scheduler.requeue``, where workers hand drained requests back (its NATS identity
may not subscribe to the other two, ``shared.security.nats_acl``). Cancels are heard
outside the queue group: each replica must hear every one. The handlers only decode and
encode; what they do is the shell's (:class:`services.scheduler.service.SchedulerShell`).
"""

from __future__ import annotations

import logging
from typing import Protocol

import msgspec
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from proto.messages import (
    ClassifiedRequest,
    PullReply,
    PullRequest,
    RequeueRequest,
    SubmitBatch,
    SubmitBatchReply,
    SubmitReply,
)
from proto.subjects import QUEUE_GROUPS
from shared.bus import serve as serve_subject
from shared.cancels import cancelled_id
from shared.counters import ERRORS
from shared.lifecycle import ServiceContext

__all__ = ["HandOffs", "serve_hand_offs"]

logger = logging.getLogger(__name__)


class HandOffs(Protocol):
    """What the handlers call (the scheduler shell)."""

    async def submit(self, requests: list[ClassifiedRequest]) -> SubmitBatchReply:
        """Store and queue new requests."""
        ...

    async def pull(
        self, pool_id: str, slots: int, *, record: bool = True
    ) -> tuple[list[ClassifiedRequest], int]:
        """Pop requests for a router; the depth left."""
        ...

    async def requeue(self, requests: list[ClassifiedRequest]) -> None:
        """Take requests back."""
        ...

    async def cancel(self, request_id: str) -> bool:
        """End a cancelled request if held; remember the cancel."""
        ...


def _pulled(_pull: PullRequest, reply: msgspec.Struct | None) -> list[dict[str, str]]:
    """The trace carriers of the requests a pull took (none: an empty pull records no span)."""
    return [req.trace for req in reply.requests] if isinstance(reply, PullReply) else []


async def serve_hand_offs(
    ctx: ServiceContext, shell: HandOffs, *, requeue_only: bool, service: str
) -> list[Subscription]:
    """Subscribe the handlers; ``requeue_only`` leaves out submit and pull."""
    subjects = ctx.subjects

    async def on_submit(batch: SubmitBatch, _msg: Msg) -> SubmitBatchReply:
        return await shell.submit(batch.requests)

    async def on_pull(pull: PullRequest, _msg: Msg) -> PullReply:
        taken, depth = await shell.pull(pull.pool_id, pull.slots)
        return PullReply(requests=taken, queued=depth)

    async def on_requeue(body: RequeueRequest, _msg: Msg) -> SubmitReply:
        await shell.requeue(body.requests)
        rid = body.requests[0].request.request_id if body.requests else "none"
        return SubmitReply(request_id=rid, accepted=True)

    async def on_cancel(msg: Msg) -> None:
        rid = cancelled_id(msg.subject, msg.data)
        if rid is None:  # fire and forget: no reply to send, so the counter is all there is
            ERRORS.labels(service, "malformed").inc()
            logger.warning("dropped a malformed cancel on %.200r", msg.subject)
            return
        await shell.cancel(rid)

    queue = QUEUE_GROUPS["scheduler"]
    subs = [
        # Not in the queue group: a cancel is an event every scheduler replica must hear.
        await ctx.nc.subscribe(subjects.cancel_wildcard, cb=on_cancel),
        await serve_subject(
            ctx.nc,
            subjects.scheduler_requeue,
            RequeueRequest,
            on_requeue,
            service=service,
            queue=queue,
            carries=lambda body, _reply: [req.trace for req in body.requests],
        ),
    ]
    if not requeue_only:
        subs += [
            await serve_subject(
                ctx.nc,
                subjects.scheduler_submit,
                SubmitBatch,
                on_submit,
                service=service,
                queue=queue,
                carries=lambda batch, _reply: [req.trace for req in batch.requests],
            ),
            await serve_subject(
                ctx.nc,
                subjects.scheduler_pull,
                PullRequest,
                on_pull,
                service=service,
                queue=queue,
                carries=_pulled,
            ),
        ]
    return subs
