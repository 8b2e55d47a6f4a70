"""The pure parts of cancellation (``shared/cancels.py``, ``services/gateway/flight.py``)."""

from __future__ import annotations

from typing import Any

import msgspec
import nats.errors

from proto.codec import decode, encode
from proto.messages import CancelRequest, ErrorReply, TokenChunk
from proto.subjects import Subjects
from services.gateway.flight import CANCELS_SENT, Flight, cancel_unanswered
from services.scheduler.pool_queues import SchedulerState
from shared.cancels import CancelMemory, cancelled_id, send_cancel
from shared.counters import ERRORS
from tests.factories import classified_request

S = Subjects("gs")


def test_a_cancel_is_remembered_for_its_window_only() -> None:
    """Test that an id is held within the window and not after it."""
    memory = CancelMemory(window_s=10.0)
    memory.add("c.r1", now=100.0)
    assert memory.holds("c.r1", 105.0)
    assert memory.holds("c.r1", 110.0)
    assert not memory.holds("c.r1", 110.5)
    assert not memory.holds("c.r2", 105.0)


def test_the_memory_forgets_the_oldest_beyond_its_size_and_expired_ones_on_add() -> None:
    """Test that the memory is bounded: the oldest ids go first, expired ones go on add."""
    memory = CancelMemory(window_s=10.0, max_ids=3)
    for i in range(5):
        memory.add(f"c.r{i}", now=float(i))
    assert len(memory) == 3
    assert not memory.holds("c.r0", 4.0)
    assert memory.holds("c.r4", 4.0)
    memory.add("c.late", now=100.0)
    assert len(memory) == 1


def test_a_cancelled_request_s_first_end_is_told_from_its_repeats_while_it_is_held() -> None:
    """Test that ``first_end`` is True once per remembered cancel (a repeated ending is
    not counted again), False for an id not cancelled, and forgotten with the cancel."""
    memory = CancelMemory(window_s=10.0)
    assert not memory.first_end("c.never")
    memory.add("c.r1", now=0.0)
    assert memory.first_end("c.r1")
    assert not memory.first_end("c.r1")
    memory.add("c.r1", now=5.0)  # the same cancel heard again
    assert not memory.first_end("c.r1")
    memory.add("c.other", now=20.0)  # c.r1's cancel expires
    memory.add("c.r1", now=21.0)  # a new cancel of the id, after the memory forgot it
    assert memory.first_end("c.r1")


def test_a_cancel_is_bound_to_the_client_of_its_subject_not_its_payload() -> None:
    """Test that the scoped id takes the subject's client id, and bad input yields None."""
    data = encode(CancelRequest(request_id="r1"))
    assert cancelled_id(S.cancel("alice"), data) == "alice.r1"
    assert cancelled_id(S.cancel("bob"), data) == "bob.r1"
    assert cancelled_id(S.cancel("bob"), b"\x81\xa4type\xa6gs.v1.cancel") is None
    assert cancelled_id(S.cancel("bob"), encode(TokenChunk(
        request_id="r1", worker_id="w", first_index=0, token_times=[]
    ))) is None  # fmt: skip
    assert cancelled_id("gs.v1.cancel.client.*", data) is None


def test_a_payload_naming_another_client_s_scoped_id_does_not_decode() -> None:
    """Test that a CancelRequest's id is one token: ``other.r1`` is malformed."""
    raw = msgspec.msgpack.encode({"type": "gs.v1.cancel", "request_id": "other.r1"})
    assert cancelled_id(S.cancel("bob"), raw) is None


class _Bus:
    """Records publishes; raises when ``down``."""

    def __init__(self, *, down: bool = False) -> None:
        self.sent: list[tuple[str, bytes]] = []
        self.down = down

    async def publish(self, subject: str, payload: bytes, **_: Any) -> None:
        if self.down:
            raise nats.errors.ConnectionClosedError
        self.sent.append((subject, payload))


async def test_send_cancel_publishes_the_client_s_own_id_on_its_own_subject() -> None:
    """Test the client helper: its subject and payload; a NATS failure is False, not raised."""
    bus = _Bus()
    assert await send_cancel(bus, S, "alice", "r7", "gave up")  # type: ignore[arg-type]
    [(subject, payload)] = bus.sent
    assert subject == "gs.v1.cancel.client.alice"
    message = decode(payload, CancelRequest)
    assert (message.request_id, message.reason) == ("r7", "gave up")
    assert message.at > 0
    assert not await send_cancel(_Bus(down=True), S, "alice", "r7")  # type: ignore[arg-type]


async def test_the_gateway_cancels_only_a_published_flight_without_its_final_reply() -> None:
    """Test that a flight ended by a Completion or ErrorReply, or never published, sends no
    cancel; one that saw only tokens does, saying why."""
    chunk = TokenChunk(request_id="r1", worker_id="w", first_index=0, token_times=[1.0])
    error = ErrorReply(code="shed", reason="x", service="scheduler")
    bus = _Bus()
    await cancel_unanswered(bus, "gw", None)  # type: ignore[arg-type]
    ended = Flight(S, "r1")
    ended.saw(chunk)
    ended.saw(error)
    await cancel_unanswered(bus, "gw", ended)  # type: ignore[arg-type]
    assert bus.sent == []
    waiting = Flight(S, "r2")
    waiting.saw(chunk)
    await cancel_unanswered(bus, "gw", waiting)  # type: ignore[arg-type]
    timed_out = Flight(S, "r3", timed_out=True)
    await cancel_unanswered(bus, "gw", timed_out)  # type: ignore[arg-type]
    sent = [(s, decode(p, CancelRequest)) for s, p in bus.sent]
    assert [(s, m.request_id, m.reason) for s, m in sent] == [
        ("gs.v1.cancel.client.gw", "r2", "client_disconnected"),
        ("gs.v1.cancel.client.gw", "r3", "gateway_timeout"),
    ]


async def test_the_gateway_counts_only_the_cancels_nats_took_as_sent() -> None:
    """Test that a cancel NATS refused (connection closed) is not counted in
    ``greenserve_gateway_cancels_total`` ("sent") but as the gateway's error
    ``cancel_not_sent``, and one NATS took is counted as sent, not as an error."""

    def counts() -> tuple[float, float]:
        sent: float = CANCELS_SENT.labels("gateway_timeout")._value.get()
        failed: float = ERRORS.labels("gateway", "cancel_not_sent")._value.get()
        return sent, failed

    sent, failed = counts()
    await cancel_unanswered(_Bus(down=True), "gw", Flight(S, "r1", timed_out=True))  # type: ignore[arg-type]
    assert counts() == (sent, failed + 1)
    bus = _Bus()
    await cancel_unanswered(bus, "gw", Flight(S, "r2", timed_out=True))  # type: ignore[arg-type]
    assert len(bus.sent) == 1
    assert counts() == (sent + 1, failed + 1)


def test_a_queued_request_can_be_taken_out_of_whichever_pool_holds_it() -> None:
    """Test SchedulerState.take: the request's message back, gone from its queue, once."""
    state = SchedulerState("fcfs")
    state.push(classified_request("a", pool_id="p1"))
    state.push(classified_request("b", pool_id="p2"))
    taken = state.take("b")
    assert taken is not None
    assert taken.request.request_id == "b"
    assert state.take("b") is None
    assert len(state.queue("p2")) == 0
    assert len(state.queue("p1")) == 1
