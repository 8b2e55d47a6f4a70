"""Keep JetStream objects alive across a NATS server that lost its store.

A nats-server restarted without its JetStream directory (a lost volume, a new pod) comes
back empty: the ingress stream and the classifier's durable consumer are gone, every
publish answers "no responders" and nothing heals until a service restarts. The owners of
those objects (the gateway and the classifier for the stream, the classifier for its
consumer) run :func:`keep_jetstream`: every ``check_s`` while connected, and at once after
a reconnect, each check asks whether its object exists and creates it again with the same
configuration when it does not. A check is one JetStream API request, cheap at 1 s.

Creating again is safe for every owner at once: the stream's creation tolerates a
concurrent creator (:func:`shared.bus.ensure_ingress_stream`), and a consumer created twice
with the same configuration is the same consumer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig
from nats.js.errors import NotFoundError
from prometheus_client import Counter

from shared.counters import ERRORS
from shared.loops import wait_event

__all__ = ["RECREATED", "Check", "ensure_consumer_exists", "keep_jetstream"]

logger = logging.getLogger(__name__)

RECREATED: Final = Counter(
    "greenserve_jetstream_recreated_total",
    "JetStream streams and consumers found missing and created again",
    ["service", "object"],
)

RECONNECT_POLL_S: Final = 0.1
"""How often the keeper looks at the client's reconnect count between checks: a reconnect
is when a wiped server is most likely, so its check should not wait out ``check_s``."""

Check = tuple[str, Callable[[], Awaitable[bool]]]
"""A name (for logs and the counter) and an idempotent ensure that returns whether it
created its object."""


async def ensure_consumer_exists(js: JetStreamContext, stream: str, config: ConsumerConfig) -> bool:
    """Create the durable consumer ``config`` on ``stream`` unless it exists; return whether
    it was created. An existing one is left as it is (its owner set it up at start)."""
    try:
        await js.consumer_info(stream, config.durable_name or "")
    except NotFoundError:
        await js.add_consumer(stream, config=config)
        return True
    return False


async def keep_jetstream(
    nc: Client,
    checks: Sequence[Check],
    stop: asyncio.Event,
    *,
    service: str,
    check_s: float = 1.0,
) -> None:
    """Run every check each ``check_s`` and after each reconnect, until ``stop`` is set.

    A check that fails (NATS is reconnecting, JetStream is not ready yet) is counted and
    tried again at the next tick; the keeper itself never ends on an error.
    """
    reconnects = int(nc.stats["reconnects"])
    while not stop.is_set():
        if nc.is_connected:
            for name, ensure in checks:
                await _run_check(name, ensure, service)
        waited = 0.0
        while waited < check_s and not stop.is_set():
            if await wait_event(stop, RECONNECT_POLL_S):
                return
            waited += RECONNECT_POLL_S
            now = int(nc.stats["reconnects"])
            if now != reconnects and nc.is_connected:
                reconnects = now
                logger.info("nats reconnected; checking %s", ", ".join(n for n, _ in checks))
                break


async def _run_check(name: str, ensure: Callable[[], Awaitable[bool]], service: str) -> None:
    try:
        created = await ensure()
    except (nats.errors.Error, TimeoutError) as exc:  # not connected or not ready: next tick
        ERRORS.labels(service, "jetstream_check").inc()
        logger.debug("checking %s failed: %r", name, exc)
        return
    except Exception:  # loop boundary: an unexpected refusal is logged, counted, retried
        ERRORS.labels(service, "jetstream_check").inc()
        logger.exception("checking %s failed", name)
        return
    if created:
        RECREATED.labels(service, name).inc()
        logger.warning("%s was missing (NATS lost its JetStream store?); created it again", name)
