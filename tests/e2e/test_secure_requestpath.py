"""The co-located request path on a secured stack (role ``requestpath``).

Real nats-server and redis-server with the generated users and ACLs
(``shared.security``); the co-located process connects as its own identity, whose rules
are the union of classifier, scheduler and router minus the subjects those three used only
among themselves. It serves traffic without a single refusal, and the servers refuse it
everything outside that union.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.msg import Msg
from redis.exceptions import NoPermissionError

from greenserve.runner import run_in_process
from greenserve.stack import REQUEST_PATH_SERVICES, StackSpec
from loadgen.replay import replay
from loadgen.report import build_report
from loadgen.traces import load_azure_trace, resolve_trace
from proto.codec import decode_any, encode
from proto.keys import Keys
from proto.messages import ClockCommand, Completion, Request, RequeueRequest, SubmitReply
from proto.subjects import Subjects
from shared.bus import connect_nats, request
from shared.clock import ModelClock
from shared.config import NatsSettings
from shared.security.identities import Identity
from shared.store import connect_redis
from tests.factories import classified_request
from tests.secure_stack import SecureStack, connect_watched, secure_stack

pytestmark = pytest.mark.connected

SPEEDUP = 20.0
USER = "requestpath"
CLIENT = Identity("client-a", "client", "client-a")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    """Secured servers and the launches of a co-located stack (as `greenserve up --secure`)."""
    spec = StackSpec(
        namespace=f"srp{int(time.time() * 1000) % 10**8}",
        workers=2,
        regions=("PJM",),
        speedup=SPEEDUP,
        origin_wall_s=time.time(),
        colocate_request_path=True,
    )
    with secure_stack(spec, Path(tmp_path_factory.mktemp("secure-rp")), (CLIENT,)) as started:
        yield started


def test_the_stack_runs_one_request_path_process_as_its_own_identity(stack: SecureStack) -> None:
    """Test that requestpath replaces the three and connects as user requestpath."""
    names = {launch.name for launch in stack.launches}
    assert USER in names
    assert not names & set(REQUEST_PATH_SERVICES)
    rp = next(launch for launch in stack.launches if launch.name == USER)
    assert rp.settings.nats.user == rp.settings.redis.username == USER
    assert rp.settings.nats.password_file is not None


async def test_a_secured_co_located_stack_serves_requests_end_to_end(stack: SecureStack) -> None:
    """Test that 40 requests complete, a worker's requeue is answered, and nothing is refused.

    The replay runs as the ``loadgen`` identity; ``worker-0`` hands a request back on
    ``scheduler.requeue`` (what a draining worker does), which the co-located process must
    still serve. Neither server may have refused a service identity (nats-server log,
    Redis ``ACL LOG``): the derived role costs the request path nothing it does.
    """
    trace = load_azure_trace(resolve_trace("conv"), max_requests=40)
    subjects = Subjects(stack.namespace)
    origin = stack.launches[0].settings.clock.origin_wall_s or 0.0
    clock = ModelClock(SPEEDUP, origin, 1_656_633_600.0)
    nc = await connect_nats(NatsSettings(url=stack.secured.tool_nats_url), "test-loadgen")
    worker = await connect_nats(stack.nats_settings("worker-0"), "test-worker")
    pool = next(la for la in stack.launches if la.name == "worker-0").settings.worker.pool_id
    completions: asyncio.Queue[Completion] = asyncio.Queue()

    async def on_reply(msg: Msg) -> None:
        answer = decode_any(msg.data)
        if isinstance(answer, Completion):
            await completions.put(answer)

    try:
        async with run_in_process(stack.launches):
            result = await replay(nc, subjects, trace, model="llama-3-8b", speedup=SPEEDUP)
            # A request handed back by a worker, addressed to the loadgen's reply space.
            rid = "loadgen-requeued-0"
            await nc.subscribe(subjects.client_reply("loadgen", rid), cb=on_reply)
            now = clock.now()
            handed_back = classified_request(
                rid,
                request=Request(
                    request_id=rid,
                    model="llama-3-8b",
                    reply_subject=subjects.client_reply("loadgen", rid),
                    sent_at=time.time(),
                    max_tokens=5,
                    prompt_tokens=10,
                    client_id="loadgen",
                ),
                pool_id=pool,
                arrival_s=now,
                deadline_s=now + 600.0,
            )
            reply = await request(
                worker,
                subjects.scheduler_requeue,
                RequeueRequest(requests=[handed_back]),
                SubmitReply,
                5.0,
            )
            done = await asyncio.wait_for(completions.get(), 10.0)
    finally:
        await nc.close()
        await worker.close()
    report = build_report(result, clock)
    assert (report["completed"], report["lost"], report["failed"]) == (40, 0, 0)
    assert report["duplicated"] == 0
    assert reply.accepted
    assert (done.request_id, done.output_tokens) == (rid, 5)
    service_users = {launch.name for launch in stack.launches}
    assert stack.nats_violations(service_users) == []
    admin = connect_redis(stack.redis_settings("admin"))
    try:
        denied = await admin.acl_log()
    finally:
        await admin.aclose()
    assert not [entry for entry in denied if entry["username"] in service_users], denied


async def test_the_server_refuses_the_request_path_clocks_and_other_clients_subjects(
    stack: SecureStack,
) -> None:
    """Test that the requestpath identity cannot set a clock nor act as or read a client.

    Each refusal is the server's: the connection gets a permissions violation and an admin
    subscriber on the same subject receives nothing, while the same connection's allowed
    publishes (a worker dispatch, a reply in a client's space) arrive.
    """
    subjects = Subjects(stack.namespace)
    node = next(la for la in stack.launches if la.name == "worker-0").settings.worker.node_id
    clock = subjects.worker_clock_v2(node, "worker-0")
    ingress = subjects.ingress_client(CLIENT.user)
    dispatch = subjects.worker_dispatch("worker-0")
    reply_to_a = subjects.client_reply(CLIENT.user, "r1")
    admin = await connect_nats(stack.nats_settings("admin"), "test-admin")
    rp, violations = await connect_watched(stack.nats_settings(USER))
    seen: dict[str, list[bytes]] = {s: [] for s in (clock, ingress, dispatch, reply_to_a)}

    def collect(subject: str) -> object:
        async def on_msg(msg: Msg) -> None:
            seen[subject].append(msg.data)

        return on_msg

    try:
        for subject in seen:
            await admin.subscribe(subject, cb=collect(subject))  # type: ignore[arg-type]
        await admin.flush()
        command = ClockCommand(worker_id="worker-0", clock_mhz=600.0, issued_by="planner")
        await rp.publish(clock, encode(command))
        assert await violations.wait_for(f'publish to "{clock}"')
        await rp.publish(subjects.worker_clock("worker-0"), encode(command))
        assert await violations.wait_for(f'publish to "{subjects.worker_clock("worker-0")}"')
        await rp.publish(ingress, b"forged request")
        assert await violations.wait_for(f'publish to "{ingress}"')
        await rp.publish(subjects.plan, b"forged plan")
        assert await violations.wait_for(f'publish to "{subjects.plan}"')
        for subject in (ingress, reply_to_a, subjects.scheduler_submit, "_INBOX.worker-0.>"):
            await rp.subscribe(subject)
            assert await violations.wait_for(f'subscription to "{subject.lower()}"'), subject
        refused = len(violations.messages)
        # The positive control: what its parts did is still allowed, and arrives.
        await rp.publish(dispatch, b"x")
        await rp.publish(reply_to_a, b"y")
        await rp.flush()
        await asyncio.sleep(0.3)
        assert len(violations.messages) == refused, violations.messages[refused:]
    finally:
        await rp.close()
        await admin.close()
    assert seen[clock] == []
    assert seen[ingress] == []
    assert seen[dispatch] == [b"x"]
    assert seen[reply_to_a] == [b"y"]


async def test_the_request_path_redis_user_keeps_to_its_keys(stack: SecureStack) -> None:
    """Test that it writes the queues but not the plan, heartbeats nor forecasts."""
    keys = Keys(stack.namespace)
    rp = connect_redis(stack.redis_settings(USER))
    try:
        await rp.hset(keys.queued, "probe", b"x")
        await rp.hdel(keys.queued, "probe")
        await rp.get(keys.plan)  # may read the plan
        for key in (keys.plan, keys.worker("worker-0"), keys.forecast("PJM")):
            with pytest.raises(NoPermissionError):
                await rp.set(key, b"forged")
    finally:
        await rp.aclose()
