"""A NATS server restarted without its JetStream store: the ingress stream and consumer heal."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from pathlib import Path

import nats
import pytest

from proto.subjects import Subjects
from services.classifier.ingress_consumer import IngressInbox, consumer_config, subscribe_inbox
from shared.bus import connect_nats, ensure_ingress_stream
from shared.config import NatsSettings
from shared.servers import start_nats
from shared.stream_keeper import RECREATED, ensure_consumer_exists, keep_jetstream
from tests.factories import until

pytestmark = pytest.mark.connected


async def _publish_until_stored(js: nats.js.JetStreamContext, subject: str, data: bytes) -> None:
    """Publish as a client does after a restart: again while the stream does not answer."""
    for _ in range(100):
        try:
            await js.publish(subject, data, timeout=0.5, headers={"Nats-Msg-Id": "one"})
        except (nats.errors.Error, TimeoutError):
            await asyncio.sleep(0.1)
            continue
        return
    pytest.fail("the ingress stream never came back")


async def test_a_wiped_server_gets_its_stream_and_consumer_back(
    tmp_path: Path, namespace: str
) -> None:
    """Test that after nats-server restarts with its store deleted, the keeper re-creates
    the ingress stream and the classifier's consumer, and a request published then reaches
    the subscription bound before the wipe."""
    subjects = Subjects(namespace)
    server = start_nats(tmp_path / "nats")
    settings = NatsSettings(url=server.url, reconnect_wait_s=0.1)
    nc = await connect_nats(settings, "keeper-test")
    stop = asyncio.Event()
    keeper: asyncio.Task[None] | None = None
    try:
        js = nc.jetstream()
        await ensure_ingress_stream(js, subjects)
        config = consumer_config(subjects, ack_wait_s=5.0, max_deliver=-1)
        assert await ensure_consumer_exists(js, subjects.ingress_stream, config)
        inbox = IngressInbox()
        await subscribe_inbox(js, subjects, inbox)
        keeper = asyncio.create_task(
            keep_jetstream(
                nc,
                [
                    ("ingress stream", lambda: ensure_ingress_stream(js, subjects, within_s=1.0)),
                    (
                        "ingress consumer",
                        lambda: ensure_consumer_exists(js, subjects.ingress_stream, config),
                    ),
                ],
                stop,
                service="keeper-test",
                check_s=30.0,  # only the reconnect can bring the check this soon
            )
        )
        before = RECREATED.labels("keeper-test", "ingress consumer")._value.get()
        server.kill()
        shutil.rmtree(server.workdir / "jetstream")
        server = start_nats(server.workdir, server.port)

        await _publish_until_stored(js, subjects.ingress_client("c"), b"after-wipe")
        await until(lambda: len(inbox) == 1, timeout_s=10.0)
        (msg,) = await inbox.take(1)
        assert msg.data == b"after-wipe"
        await msg.ack()
        info = await js.consumer_info(subjects.ingress_stream, config.durable_name or "")
        assert info.config.deliver_subject == subjects.classifier_deliver
        assert RECREATED.labels("keeper-test", "ingress consumer")._value.get() == before + 1
    finally:
        stop.set()
        if keeper is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        await nc.close()
        server.stop()
