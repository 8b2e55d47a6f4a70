"""The classifier's push consumer: created, and an older layout replaced with nothing lost."""

from __future__ import annotations

import asyncio
import dataclasses

import nats
import pytest
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, ReplayPolicy

from proto.subjects import Subjects
from services.classifier.ingress_consumer import (
    IngressInbox,
    consumer_config,
    ensure_ingress_consumer,
    subscribe_inbox,
)
from shared.bus import ensure_ingress_stream
from shared.security.nats_acl import CLASSIFIER_CONSUMER
from shared.servers import ServerProcess

pytestmark = pytest.mark.connected


async def test_an_old_pull_consumer_is_replaced_and_its_messages_still_arrive(
    nats_server: ServerProcess, namespace: str
) -> None:
    """Test that the pull consumer of an older classifier gives way to the push consumer.

    The old consumer (filtered on ``ingress.request``, as before bound subjects) has one
    message delivered but never acked and cannot see a bound one; after the replacement
    both arrive by push, and a second call changes nothing.
    """
    subjects = Subjects(namespace)
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await ensure_ingress_stream(js, subjects)
        old = ConsumerConfig(durable_name=CLASSIFIER_CONSUMER, ack_policy=AckPolicy.EXPLICIT)
        pull = await js.pull_subscribe(
            subjects.ingress_request,
            durable=CLASSIFIER_CONSUMER,
            stream=subjects.ingress_stream,
            config=old,
        )
        await js.publish(subjects.ingress_request, b"delivered-unacked")
        (taken,) = await pull.fetch(1, timeout=2.0)  # in flight at the old classifier
        assert taken.data == b"delivered-unacked"
        await js.publish(subjects.ingress_client("c"), b"bound")
        await pull.unsubscribe()

        config = consumer_config(subjects, ack_wait_s=30.0, max_deliver=5)
        assert await ensure_ingress_consumer(js, subjects, config)
        assert not await ensure_ingress_consumer(js, subjects, config)
        info = await js.consumer_info(subjects.ingress_stream, CLASSIFIER_CONSUMER)
        assert info.config.deliver_subject == subjects.classifier_deliver
        assert info.config.deliver_group == CLASSIFIER_CONSUMER
        assert info.config.filter_subject == subjects.ingress_wildcard

        inbox = IngressInbox()
        await subscribe_inbox(js, subjects, inbox)
        got: list[Msg] = []
        async with asyncio.timeout(5.0):
            while len(got) < 2:
                got += await inbox.take(8)
        assert sorted(m.data for m in got) == [b"bound", b"delivered-unacked"]
        for msg in got:
            await msg.ack()
    finally:
        await nc.close()


async def test_a_missing_consumer_is_created_as_a_push_consumer(
    nats_server: ServerProcess, namespace: str
) -> None:
    """Test that the first classifier creates the push consumer and a message reaches it."""
    subjects = Subjects(namespace)
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await ensure_ingress_stream(js, subjects)
        config = consumer_config(subjects, ack_wait_s=30.0, max_deliver=5)
        assert not await ensure_ingress_consumer(js, subjects, config)
        inbox = IngressInbox()
        await subscribe_inbox(js, subjects, inbox)
        await js.publish(subjects.ingress_request, b"one")
        async with asyncio.timeout(5.0):
            (msg,) = await inbox.take(8)
        assert msg.data == b"one"
    finally:
        await nc.close()


async def test_a_consumer_of_an_older_max_deliver_is_updated_in_place(
    nats_server: ServerProcess, namespace: str
) -> None:
    """Test that the push consumer an older classifier made with ``max_deliver`` 20 (which
    stranded messages after twenty failed hand-offs) is updated to the configured delivery
    settings, in place: the same consumer, its delivered-unacked message still pending."""
    subjects = Subjects(namespace)
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await ensure_ingress_stream(js, subjects)
        older = consumer_config(subjects, ack_wait_s=5.0, max_deliver=20)
        await js.add_consumer(subjects.ingress_stream, config=older)
        before = await js.consumer_info(subjects.ingress_stream, CLASSIFIER_CONSUMER)

        wanted = consumer_config(subjects, ack_wait_s=2.0, max_deliver=-1)
        assert not await ensure_ingress_consumer(js, subjects, wanted)
        info = await js.consumer_info(subjects.ingress_stream, CLASSIFIER_CONSUMER)
        assert (info.config.max_deliver, info.config.ack_wait) == (-1, 2.0)
        assert info.created == before.created  # updated, not deleted and made again
        assert not await ensure_ingress_consumer(js, subjects, wanted)  # nothing to change
    finally:
        await nc.close()


async def test_a_consumer_jetstream_will_not_update_is_made_again_and_loses_nothing(
    nats_server: ServerProcess, namespace: str
) -> None:
    """Test that a consumer whose replay policy differs (JetStream refuses to update that
    field) is deleted and created again with the wanted settings, and that a message it had
    delivered but not seen acked is delivered by the new one."""
    subjects = Subjects(namespace)
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await ensure_ingress_stream(js, subjects)
        wanted = consumer_config(subjects, ack_wait_s=30.0, max_deliver=-1)
        odd = dataclasses.replace(wanted, replay_policy=ReplayPolicy.ORIGINAL, max_deliver=20)
        await js.add_consumer(subjects.ingress_stream, config=odd)
        first = IngressInbox()
        sub = await subscribe_inbox(js, subjects, first)
        await js.publish(subjects.ingress_request, b"delivered-unacked")
        async with asyncio.timeout(5.0):
            (taken,) = await first.take(8)
        assert taken.data == b"delivered-unacked"
        await sub.unsubscribe()

        assert await ensure_ingress_consumer(js, subjects, wanted)
        info = await js.consumer_info(subjects.ingress_stream, CLASSIFIER_CONSUMER)
        assert (info.config.replay_policy, info.config.max_deliver) == (ReplayPolicy.INSTANT, -1)
        again = IngressInbox()
        await subscribe_inbox(js, subjects, again)
        async with asyncio.timeout(5.0):
            (redelivered,) = await again.take(8)
        assert redelivered.data == b"delivered-unacked"
        await redelivered.ack()
    finally:
        await nc.close()


async def test_two_classifiers_share_the_work_and_an_unacked_message_is_redelivered(
    nats_server: ServerProcess, namespace: str
) -> None:
    """Test that the deliver group splits messages between replicas, each to one only, and
    that a message one replica never acks reaches a replica again after ``ack_wait``."""
    subjects = Subjects(namespace)
    first, second = await nats.connect(nats_server.url), await nats.connect(nats_server.url)
    try:
        js = first.jetstream()
        await ensure_ingress_stream(js, subjects)
        config = consumer_config(subjects, ack_wait_s=1.0, max_deliver=5)
        await ensure_ingress_consumer(js, subjects, config)
        inboxes = [IngressInbox(), IngressInbox()]
        for nc, inbox in zip((first, second), inboxes, strict=True):
            await subscribe_inbox(nc.jetstream(), subjects, inbox)
        for i in range(40):
            await js.publish(subjects.ingress_request, str(i).encode())
        seen: dict[bytes, int] = {}
        served = [0, 0]
        dropped: Msg | None = None
        async with asyncio.timeout(10.0):
            while len(seen) < 40 or dropped is None or seen[dropped.data] < 2:
                for k, inbox in enumerate(inboxes):
                    if not len(inbox):
                        continue
                    for msg in await inbox.take(64):
                        served[k] += 1
                        seen[msg.data] = seen.get(msg.data, 0) + 1
                        if dropped is None:
                            dropped = msg  # never acked: a classifier killed mid-batch
                        else:
                            await msg.ack()
                await asyncio.sleep(0.02)
        assert set(seen) == {str(i).encode() for i in range(40)}
        assert all(len(inbox) == 0 for inbox in inboxes)
        assert seen[dropped.data] == 2
        assert all(served), served  # 40 messages in one queue group: both replicas got work
        assert sum(n for n in seen.values()) == 41  # no other message came twice
    finally:
        await first.close()
        await second.close()


async def test_the_inbox_hands_out_batches_in_arrival_order() -> None:
    """Test that take waits for a message and returns at most ``limit``, oldest first;
    drain returns the rest (handed back at shutdown)."""
    inbox = IngressInbox()
    waiter = asyncio.create_task(inbox.take(2))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    msgs = [Msg(_client=None, subject=f"s{i}") for i in range(3)]  # type: ignore[arg-type]
    for msg in msgs:  # all three arrive before the waiter runs again
        await inbox.on_message(msg)
    assert await waiter == msgs[:2]
    assert len(inbox) == 1
    assert inbox.drain() == msgs[2:]
    assert len(inbox) == 0


async def test_a_closed_inbox_wakes_its_taker_and_keeps_what_waits_for_drain() -> None:
    """Test that close ends a waiting take with an empty batch (the classifier stops) and
    that messages still waiting are left for drain (to be nak-ed), not handed out."""
    inbox = IngressInbox()
    waiter = asyncio.create_task(inbox.take(8))
    await asyncio.sleep(0.01)
    inbox.close()
    assert await waiter == []
    msg = Msg(_client=None, subject="s")  # type: ignore[arg-type]
    await inbox.on_message(msg)
    assert await inbox.take(8) == []
    assert inbox.drain() == [msg]
