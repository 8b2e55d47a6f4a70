"""The credential escalation of issue 29, replayed against the generated server configuration.

A worker identity subscribes to a subject it may also publish on (its peers' stats). Were it
allowed to answer requests whatever their reply subject (``allow_responses``), it could
publish its own stats with any reply subject, receive the message and "answer" it there:
set another GPU's clock with a spoofed issuer, purge the ingress stream through
``$JS.API``, or publish a plan of a far-future epoch. Each route is tried here with
worker-0's credentials on a real nats-server; the server must refuse every one, an admin
listener must hear none of them, and a plan with an implausible epoch that does reach a
follower (the operator may publish it) must be ignored and counted.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import nats.errors
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from greenserve.runner import run_in_process
from greenserve.stack import StackSpec
from proto.codec import encode
from proto.messages import ClockCommand, Plan, PoolPlan, RouteWeight
from proto.subjects import Subjects
from shared.bus import connect_nats, ensure_ingress_stream
from shared.counters import ERRORS
from shared.plan_watch import IMPLAUSIBLE_PLAN_EPOCH
from tests.secure_stack import SecureStack, Violations, connect_watched, secure_stack

pytestmark = pytest.mark.connected

FAR_EPOCH = 2_000_000_000
"""The forged plan's epoch: about 114,000 years of 30-minute epochs ahead."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    """A secured NATS and Redis for one namespace with two workers on one node."""
    spec = StackSpec(
        namespace=f"esc{int(time.time() * 1000) % 10**8}",
        workers=2,
        regions=("PJM",),
        speedup=20.0,
        origin_wall_s=time.time(),
    )
    with secure_stack(spec, Path(tmp_path_factory.mktemp("escalation")), ()) as started:
        yield started


def _worker_node(stack: SecureStack) -> str:
    """The node worker-0 runs on (its stats and clock subjects name it)."""
    return next(la for la in stack.launches if la.name == "worker-0").settings.worker.node_id


def _void_plan(epoch: int) -> Plan:
    """A plan routing every class to a pool that does not exist."""
    void = PoolPlan(pool_id="void", region="PJM", gpu="A100-80GB", tp=1, instances=1)
    return Plan(
        epoch=epoch,
        issued_at=time.time(),
        valid_until=time.time() + 3600.0,
        scheme="dynamollm9",
        pools=[void],
        routes={"*": [RouteWeight(pool_id="void", weight=1.0)]},
    )


def _refusal(subject: str) -> str:
    """The server's error for a refused publish, lower-cased as ``Violations`` compares."""
    return f'permissions violation for publish to "{subject}"'.lower()


async def _answer_own_message(
    nc: Client, violations: Violations, own_subject: str, target: str, payload: bytes
) -> bool:
    """Publish on ``own_subject`` with reply ``target``, answer it there; True if refused.

    Returns whether the server reported a publish violation naming ``target``.
    """
    received = asyncio.Event()

    async def on_own(msg: Msg) -> None:
        await msg.respond(payload)
        received.set()

    sub = await nc.subscribe(own_subject, cb=on_own)
    try:
        await nc.flush()
        await nc.publish(own_subject, b"", reply=target)
        await asyncio.wait_for(received.wait(), 2.0)  # the route's first half works
        return await violations.wait_for(_refusal(target))
    finally:
        await sub.unsubscribe()


async def _heard(listener: Client, subject: str) -> list[Msg]:
    """Start recording what ``listener`` receives on ``subject``."""
    heard: list[Msg] = []

    async def on_msg(msg: Msg) -> None:
        heard.append(msg)

    await listener.subscribe(subject, cb=on_msg)
    await listener.flush()
    return heard


async def test_a_worker_cannot_answer_its_own_message_onto_a_clock_subject(
    stack: SecureStack,
) -> None:
    """Test that worker-0 cannot set another GPU's clock through a reply subject."""
    subjects = Subjects(stack.namespace)
    node = _worker_node(stack)
    worker, violations = await connect_watched(stack.nats_settings("worker-0"))
    admin = await connect_nats(stack.nats_settings("admin"), "test-admin")
    try:
        own_stats = subjects.worker_stats("main", node, "worker-0")
        for target in (
            subjects.worker_clock_v2("node-other", "worker-1"),
            subjects.worker_clock_v2(node, "worker-1"),
        ):
            heard = await _heard(admin, target)
            forged = ClockCommand(worker_id="worker-1", clock_mhz=210.0, issued_by="planner")
            refused = await _answer_own_message(
                worker, violations, own_stats, target, encode(forged)
            )
            await admin.flush()
            assert refused, violations.messages
            assert heard == []
    finally:
        await worker.close()
        await admin.close()


async def test_a_worker_cannot_purge_the_ingress_stream_by_any_route(stack: SecureStack) -> None:
    """Test that STREAM.PURGE and STREAM.DELETE are refused to worker-0, directly or as a reply.

    The stream keeps its message, which only admin (the stream's owner) could remove.
    """
    subjects = Subjects(stack.namespace)
    stream = subjects.ingress_stream
    node = _worker_node(stack)
    admin = await connect_nats(stack.nats_settings("admin"), "test-admin")
    worker, violations = await connect_watched(stack.nats_settings("worker-0"))
    try:
        js = admin.jetstream()
        await ensure_ingress_stream(js, subjects)
        await js.publish(subjects.ingress_request, b"kept")
        before = (await js.stream_info(stream)).state.messages
        assert before >= 1
        for api in (f"$JS.API.STREAM.PURGE.{stream}", f"$JS.API.STREAM.DELETE.{stream}"):
            own_stats = subjects.worker_stats("main", node, "worker-0")
            assert await _answer_own_message(worker, violations, own_stats, api, b"")
            violations.messages.clear()
            with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
                await worker.request(api, b"", timeout=1.0)
            assert await violations.wait_for(_refusal(api))
            violations.messages.clear()
        assert (await js.stream_info(stream)).state.messages == before
    finally:
        await worker.close()
        await admin.close()


@pytest.mark.parametrize("user", ["classifier", "gateway"])
async def test_the_stream_s_users_may_not_purge_or_delete_it(stack: SecureStack, user: str) -> None:
    """Test that the identities with JetStream grants (creating the stream, consuming it)
    are still refused its purge and delete: only admin owns the stream."""
    subjects = Subjects(stack.namespace)
    nc, violations = await connect_watched(stack.nats_settings(user))
    try:
        for verb in ("PURGE", "DELETE"):
            api = f"$JS.API.STREAM.{verb}.{subjects.ingress_stream}"
            with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
                await nc.request(api, b"", timeout=1.0)
            assert await violations.wait_for(_refusal(api))
            violations.messages.clear()
    finally:
        await nc.close()


async def test_a_far_future_plan_is_refused_by_the_server_and_by_the_followers(
    stack: SecureStack,
) -> None:
    """Test that worker-0 cannot publish a plan as a reply, and a follower ignores one far
    ahead even from an identity allowed to publish plans (counted, not applied)."""
    subjects = Subjects(stack.namespace)
    node = _worker_node(stack)
    forged = encode(_void_plan(FAR_EPOCH))
    worker, violations = await connect_watched(stack.nats_settings("worker-0"))
    admin = await connect_nats(stack.nats_settings("admin"), "test-admin")
    try:
        heard = await _heard(admin, subjects.plan)
        own_stats = subjects.worker_stats("main", node, "worker-0")
        assert await _answer_own_message(worker, violations, own_stats, subjects.plan, forged)
        assert heard == []
        # The follower's own check: admin may publish a plan, worker-1 still refuses it.
        follower = next(la for la in stack.launches if la.name == "worker-1")
        refused = ERRORS.labels("worker-1", IMPLAUSIBLE_PLAN_EPOCH)
        before = refused._value.get()
        async with run_in_process([follower]):
            deadline = time.monotonic() + 10.0
            while refused._value.get() == before and time.monotonic() < deadline:
                await admin.publish(subjects.plan, forged)
                await asyncio.sleep(0.2)  # re-published until the follower has subscribed
        assert refused._value.get() > before
        assert len(heard) >= 1  # the forged plan did reach the follower's subject
    finally:
        await worker.close()
        await admin.close()


def test_the_server_holds_password_hashes_and_no_password(stack: SecureStack) -> None:
    """Test that nats.conf (0600) has a bcrypt hash per user that matches the user's
    password, while neither it nor the server's environment holds a password."""
    nats_server = stack.secured.servers[0]
    conf = nats_server.workdir / "nats.conf"
    text = conf.read_text()
    assert conf.stat().st_mode & 0o777 == 0o600
    environ = Path(f"/proc/{nats_server.proc.pid}/environ").read_bytes().decode(errors="replace")
    assert "GS_NATS_PASSWORD_" not in environ
    for user, cred in stack.creds.items():
        assert cred.nats_password not in text
        assert cred.nats_password not in environ
        hashed = re.search(rf'user: "{re.escape(user)}", password: "([^"]+)"', text)
        assert hashed is not None, user
        assert bcrypt.checkpw(cred.nats_password.encode(), hashed.group(1).encode()), user
