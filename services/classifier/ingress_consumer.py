"""The classifier's durable *push* consumer on the ingress stream, and its batching inbox.

Why push, not pull (docs/performance.md, "Push ingress"): a pull consumer costs a ``MSG.NEXT``
request per fetch (two when the stream is empty: a no-wait probe, then a long poll), and a
request that arrives while no fetch is outstanding waits for the next one. Measured on the
bare stream (file storage, one publisher, explicit acks, 64-message batches), publish to
hand-over p50 / p99 at 400, 1,000 and 2,000 req/s: pull 1.2 / 3.5, 1.5 / 5.6, 2.6 / 20.7 ms;
push 0.6 / 1.2, 0.6 / 2.6, 0.6 / 1.8 ms. A push consumer sends each message as it is
stored, so nothing waits for a poll.

What stays as it was: explicit acks after the hand-off (an unacked message is redelivered
after ``ack_wait``), ``max_ack_pending`` bounding what is in flight, work-queue retention,
and replicas sharing the work: the consumer has a deliver group, so every classifier
subscribes to the deliver subject in that queue group and each message goes to one.
Batches still form: messages that arrive while the classifier is busy wait in the inbox
and are taken together (one Redis command per batch), but no message waits for a batch
to fill.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, ReplayPolicy
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

from proto.subjects import Subjects
from shared.security.nats_acl import CLASSIFIER_CONSUMER

__all__ = [
    "CLASSIFIER_CONSUMER",
    "IngressInbox",
    "consumer_config",
    "ensure_ingress_consumer",
    "subscribe_inbox",
]

MAX_ACK_PENDING = 1024
"""Delivered, unacked messages at most (all classifiers together).

A pushed message waits in a classifier's inbox, and its ``ack_wait`` (5 s) runs from the
delivery: 1,024 is half a second of backlog at 2,000 req/s, so an overloaded classifier is
not sent so much that it expires there and comes again (harmless, the scheduler drops the
repeat, but wasted). The fetch loop held at most 4 × 64 in flight."""

logger = logging.getLogger(__name__)


def consumer_config(
    subjects: Subjects, *, ack_wait_s: float, max_deliver: int, replicas: int = 1
) -> ConsumerConfig:
    """The consumer every classifier binds to (replicas create it with the same config);
    ``replicas`` (``nats.replicas``) copies its state (acks, pending) as the stream's."""
    return ConsumerConfig(
        durable_name=CLASSIFIER_CONSUMER,
        deliver_subject=subjects.classifier_deliver,
        deliver_group=CLASSIFIER_CONSUMER,
        filter_subject=subjects.ingress_wildcard,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=ack_wait_s,
        max_deliver=max_deliver,
        max_ack_pending=MAX_ACK_PENDING,
        num_replicas=replicas,
    )


def _same_layout(existing: ConsumerConfig, wanted: ConsumerConfig) -> bool:
    return (
        existing.deliver_subject == wanted.deliver_subject
        and existing.deliver_group == wanted.deliver_group
        and existing.filter_subject == wanted.filter_subject
    )


def _same_delivery(existing: ConsumerConfig, wanted: ConsumerConfig) -> bool:
    """Whether the settings the classifier owns (how and how often it is delivered) agree."""
    return (
        existing.max_deliver == wanted.max_deliver
        and math.isclose(existing.ack_wait or 0.0, wanted.ack_wait or 0.0, abs_tol=1e-3)
        and existing.max_ack_pending == wanted.max_ack_pending
        and existing.ack_policy == wanted.ack_policy
        and existing.deliver_policy == wanted.deliver_policy
        and (existing.replay_policy or ReplayPolicy.INSTANT)
        == (wanted.replay_policy or ReplayPolicy.INSTANT)
    )


async def ensure_ingress_consumer(
    js: JetStreamContext, subjects: Subjects, config: ConsumerConfig
) -> bool:
    """Create the consumer, or bring an existing one to ``config``; return whether an
    existing one was deleted and created again.

    Older classifiers made a *pull* consumer of the same name (and before that one filtered
    on ``ingress.request`` only). A consumer cannot change between pull and push, and a
    work-queue stream allows no second consumer on the same subjects, so an old one is
    deleted and this one created. Nothing is lost: work-queue retention keeps every
    unacked message in the stream, and the new consumer (deliver policy ``all``) delivers
    them, including those the old one had delivered but not seen acked.

    A consumer of this layout whose delivery settings differ (an older version's
    ``max_deliver`` 20, which stranded messages after ten seconds of failed hand-offs) is
    updated in place. JetStream refuses to update some fields (replay policy, storage type,
    heartbeats: an operator's consumer made with ``replay_policy`` original, say), and
    such a consumer is deleted and created again, losing nothing for the same reason.
    """
    stream = subjects.ingress_stream
    try:
        info = await js.consumer_info(stream, CLASSIFIER_CONSUMER)
    except NotFoundError:
        await js.add_consumer(stream, config=config)
        return False
    if _same_layout(info.config, config):
        if _same_delivery(info.config, config):
            return False
        try:
            # CONSUMER.CREATE of an existing durable with another config is an update.
            await js.add_consumer(stream, config=config)
        except ServiceUnavailableError:
            raise  # JetStream is busy, not refusing: the caller asks again
        except APIError as exc:
            logger.info(
                "consumer %s cannot be updated in place (%s); creating it again",
                CLASSIFIER_CONSUMER,
                exc.description,
            )
        else:
            logger.info(
                "updated consumer %s: max_deliver %s -> %s, ack_wait %s -> %s s",
                CLASSIFIER_CONSUMER,
                info.config.max_deliver,
                config.max_deliver,
                info.config.ack_wait,
                config.ack_wait,
            )
            return False
    await js.delete_consumer(stream, CLASSIFIER_CONSUMER)
    logger.info(
        "replaced consumer %s (deliver subject %s, filter %s) by the push consumer on %s",
        CLASSIFIER_CONSUMER,
        info.config.deliver_subject,
        info.config.filter_subject,
        config.deliver_subject,
    )
    await js.add_consumer(stream, config=config)
    return True


async def subscribe_inbox(
    js: JetStreamContext, subjects: Subjects, inbox: IngressInbox
) -> JetStreamContext.PushSubscription:
    """Bind to the (existing) consumer in its deliver group; deliveries go to ``inbox``."""
    return await js.subscribe(
        subjects.ingress_wildcard,
        queue=CLASSIFIER_CONSUMER,
        durable=CLASSIFIER_CONSUMER,
        stream=subjects.ingress_stream,
        cb=inbox.on_message,
        manual_ack=True,
        # Above max_ack_pending, so the client never drops a delivery as a slow consumer.
        pending_msgs_limit=4 * MAX_ACK_PENDING,
    )


class IngressInbox:
    """Delivered messages waiting to be classified, taken in batches.

    The subscription's callback only appends (it runs once per message); the consume loop
    takes everything waiting, up to a batch, whenever it is free.
    """

    def __init__(self) -> None:
        """Start empty and open."""
        self._waiting: deque[Msg] = deque()
        self._arrived = asyncio.Event()
        self._closed = False

    def __len__(self) -> int:
        """Messages waiting."""
        return len(self._waiting)

    async def on_message(self, msg: Msg) -> None:
        """Subscription callback: keep the message for the next batch."""
        self._waiting.append(msg)
        self._arrived.set()

    async def take(self, limit: int) -> list[Msg]:
        """Wait for at least one message; return up to ``limit`` in arrival order.

        Returns an empty list once the inbox is closed (what waits stays for :meth:`drain`).
        """
        while not self._waiting or self._closed:
            if self._closed:
                return []
            self._arrived.clear()
            await self._arrived.wait()
        waiting = self._waiting
        count = min(limit, len(waiting))
        return [waiting.popleft() for _ in range(count)]

    def close(self) -> None:
        """Stop handing out messages: a waiting :meth:`take` returns an empty list."""
        self._closed = True
        self._arrived.set()

    def drain(self) -> list[Msg]:
        """Remove and return every waiting message (at shutdown, to hand back)."""
        msgs = list(self._waiting)
        self._waiting.clear()
        return msgs
