"""``greenserve down`` answers every request its stack still held, and is safe to repeat.

Before: ``down`` under load stopped the servers with requests still in the ingress stream
and in Redis, and their clients never heard of them again (70 of 300 in one run); and a
second ``down`` with nothing running failed (exit 1).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import msgspec
import pytest

from greenserve.commands import down
from greenserve.leftovers import LEFTOVER_CODE, answer_leftovers
from greenserve.local import STATE_FILE, StackState
from proto.codec import encode
from proto.keys import Keys
from proto.messages import Assignment, Request
from proto.subjects import Subjects
from shared.bus import connect_nats, ensure_ingress_stream
from shared.config import NatsSettings
from shared.servers import ServerProcess
from tests.factories import client_request, error_replies, until

pytestmark = pytest.mark.connected


def _state(namespace: str, nats_url: str, redis_url: str, **fields: object) -> StackState:
    return StackState(
        namespace=namespace,
        nats_url=nats_url,
        redis_url=redis_url,
        speedup=1.0,
        origin_wall_s=time.time(),
        model="llama-3-8b",
        workers=0,
        **fields,  # type: ignore[arg-type]
    )


def _published(subjects: Subjects, rid: str) -> Request:
    """What client ``c`` publishes on its own ingress subject (its id unscoped)."""
    return msgspec.structs.replace(
        client_request(subjects, "c", rid).request, request_id=rid, client_id=None
    )


async def test_down_answers_each_request_left_in_the_stream_and_in_redis_once(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that, once the services are stopped, every request still in the ingress stream,
    in ``queued`` or in ``dispatched`` gets one ``unavailable`` error (one in the stream and
    in ``queued`` at once: one answer), that one its worker ended gets none, and that the
    stream and both hashes are left empty."""
    subjects, keys = Subjects(namespace), Keys(namespace)
    client = await connect_nats(NatsSettings(url=nats_server.url), "test-client")
    redis = _state(namespace, nats_server.url, redis_server.url).redis_client()
    try:
        errors, _ = await error_replies(client, subjects.client_wildcard("c"))
        js = client.jetstream()
        await ensure_ingress_stream(js, subjects)
        for rid in ("r1", "r2"):  # published, never handed off
            await js.publish(subjects.ingress_client("c"), encode(_published(subjects, rid)))
        queued = {  # r1 as well: handed off, but its ack was lost
            f"c.{rid}": encode(client_request(subjects, "c", rid)) for rid in ("r1", "r3")
        }
        await redis.hset(keys.queued, mapping=queued)  # type: ignore[arg-type]
        placed = {
            f"c.{rid}": encode(
                Assignment(
                    request=client_request(subjects, "c", rid), worker_id="w0", dispatched_at=1.0
                )
            )
            for rid in ("r4", "r5")
        }
        await redis.hset(keys.dispatched, mapping=placed)  # type: ignore[arg-type]
        await redis.zadd(keys.ended("w0"), {"c.r5": time.time()})  # r5 finished there

        outcome = await answer_leftovers(_state(namespace, nats_server.url, redis_server.url))

        assert outcome.error == ""
        assert sorted(outcome.answered) == ["c.r1", "c.r2", "c.r3", "c.r4"]
        await until(lambda: len(errors) >= 4, timeout_s=5.0)
        assert sorted((e.request_id or "", e.code) for e in errors) == [
            (rid, LEFTOVER_CODE) for rid in ("r1", "r2", "r3", "r4")
        ]
        assert (await js.stream_info(subjects.ingress_stream)).state.messages == 0
        assert await redis.hlen(keys.queued) == 0
        assert await redis.hlen(keys.dispatched) == 0
    finally:
        await redis.aclose()
        await client.close()


def test_down_twice_stops_the_stack_then_says_no_stack_is_running(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Test that ``down`` stops a recorded stack's processes and exits 0, and that a second
    ``down`` with nothing running exits 0 too, saying "no stack running"."""
    service = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = _state(namespace, nats_server.url, redis_server.url, pids={"svc": service.pid})
        (tmp_path / STATE_FILE).write_text(json.dumps(asdict(state)))
        args = argparse.Namespace(state_dir=tmp_path)

        assert down.run(args) == 0
        assert service.wait(5.0) is not None
        assert "stopped 1 processes" in capsys.readouterr().err

        assert down.run(args) == 0
        assert "no stack running" in capsys.readouterr().err
    finally:
        service.kill()
        service.wait()


async def test_down_sweeps_a_secured_stack_as_its_admin_identity(
    tmp_path: Path, namespace: str
) -> None:
    """Test, on servers started as ``greenserve up --secure`` starts them, that ``down``
    answers and clears what the ingress stream and Redis hold, connecting as the ``admin``
    identity whose password files the state names: the state's own URLs carry loadgen
    and monitor, which may not read the queues, and with them alone the sweep stops on
    a permission error and answers nothing (what ``down --secure`` did before)."""
    import dataclasses

    from greenserve.leftovers import as_admin
    from shared.security.local_servers import start_secure_servers

    subjects, keys = Subjects(namespace), Keys(namespace)
    secured = start_secure_servers([], namespace, tmp_path)
    assert secured.admin_files is not None
    state = _state(
        namespace,
        secured.tool_nats_url,
        secured.tool_redis_url,
        secure=True,
        admin_nats_password_file=str(secured.admin_files.nats_password_file),
        admin_redis_password_file=str(secured.admin_files.redis_password_file),
    )
    operator = as_admin(state)
    assert "admin:" in operator.nats_url
    assert "admin:" in operator.redis_url
    client = await connect_nats(NatsSettings(url=operator.nats_url), "test-client")
    redis = operator.redis_client()
    try:
        errors, _ = await error_replies(client, subjects.client_wildcard("c"))
        js = client.jetstream()
        await ensure_ingress_stream(js, subjects)
        await js.publish(subjects.ingress_client("c"), encode(_published(subjects, "r1")))
        await redis.hset(keys.queued, "c.r2", encode(client_request(subjects, "c", "r2")))
        placed = Assignment(
            request=client_request(subjects, "c", "r3"), worker_id="w0", dispatched_at=1.0
        )
        await redis.hset(keys.dispatched, "c.r3", encode(placed))

        unprivileged = dataclasses.replace(
            state, admin_nats_password_file=None, admin_redis_password_file=None
        )
        refused = await answer_leftovers(unprivileged)
        assert "NoPermissionError" in refused.error
        assert refused.answered == []

        outcome = await answer_leftovers(state)

        assert outcome.error == ""
        assert sorted(outcome.answered) == ["c.r1", "c.r2", "c.r3"]
        await until(lambda: len(errors) >= 3, timeout_s=5.0)
        assert sorted((e.request_id or "", e.code) for e in errors) == [
            (rid, LEFTOVER_CODE) for rid in ("r1", "r2", "r3")
        ]
        assert (await js.stream_info(subjects.ingress_stream)).state.messages == 0
        assert await redis.hlen(keys.queued) == 0
        assert await redis.hlen(keys.dispatched) == 0
    finally:
        await redis.aclose()
        await client.close()
        for server in reversed(secured.servers):
            server.stop()
