"""Upgrading in place: a classifier consumer made before bound ingress subjects is widened."""

from __future__ import annotations

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from proto.subjects import Subjects
from services.classifier.ingress_identity import widen_legacy_consumer
from shared.bus import ensure_ingress_stream
from shared.servers import ServerProcess

pytestmark = pytest.mark.connected


async def test_an_old_consumer_is_widened_and_keeps_its_messages(
    nats_server: ServerProcess, namespace: str
) -> None:
    """Test that a consumer on ingress.request is re-filtered on ingress.> with nothing lost.

    Before the update a bound subject's message would never be delivered; after it, both
    the message waiting on the old subject and the bound one arrive, and a second call
    changes nothing.
    """
    subjects = Subjects(namespace)
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await ensure_ingress_stream(js, subjects)
        old = ConsumerConfig(durable_name="classifier", ack_policy=AckPolicy.EXPLICIT)
        await js.pull_subscribe(
            subjects.ingress_request,
            durable="classifier",
            stream=subjects.ingress_stream,
            config=old,
        )
        await js.publish(subjects.ingress_request, b"old")
        await js.publish(subjects.ingress_client("c"), b"bound")
        info = await js.consumer_info(subjects.ingress_stream, "classifier")
        assert info.num_pending == 1  # the bound message is invisible to the old filter
        assert await widen_legacy_consumer(js, subjects, "classifier")
        assert not await widen_legacy_consumer(js, subjects, "classifier")
        sub = await js.pull_subscribe(
            subjects.ingress_wildcard, durable="classifier", stream=subjects.ingress_stream
        )
        msgs = await sub.fetch(2, timeout=2.0)
        assert sorted((m.subject, m.data) for m in msgs) == [
            (subjects.ingress_client("c"), b"bound"),
            (subjects.ingress_request, b"old"),
        ]
        info = await js.consumer_info(subjects.ingress_stream, "classifier")
        assert info.config.filter_subject == subjects.ingress_wildcard
        assert info.config.ack_policy == AckPolicy.EXPLICIT  # the rest of its config is kept
    finally:
        await nc.close()


async def test_no_consumer_yet_is_left_to_the_classifier(
    nats_server: ServerProcess, namespace: str
) -> None:
    """Test that a missing consumer is not created here (pull_subscribe makes it)."""
    subjects = Subjects(namespace)
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await ensure_ingress_stream(js, subjects)
        assert not await widen_legacy_consumer(js, subjects, "classifier")
    finally:
        await nc.close()
