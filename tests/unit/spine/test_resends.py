"""A reconnected client's ask for the endings it may have missed (``shared/resends.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

from proto.codec import decode, encode
from proto.messages import MAX_RESEND_IDS, ResendRequest
from proto.subjects import Subjects
from shared.resends import ask_resend, resend_after_reconnects, resend_ids

S = Subjects("gs")


def test_an_ask_is_bound_to_the_client_of_its_subject_not_its_payload() -> None:
    """Test that the ids are scoped with the subject's client id, and bad input is None."""
    payload = encode(ResendRequest(request_ids=["r1", "r2"]))
    assert resend_ids(S.resend("gw"), payload) == ["gw.r1", "gw.r2"]
    assert resend_ids(S.resend("lg"), payload) == ["lg.r1", "lg.r2"]
    assert resend_ids("gs.v1.resend.client.bad token", payload) is None
    assert resend_ids(S.resend("gw"), b"\x00garbage") is None


class _Nc:
    """A NATS client stand-in: records publishes; reconnects when told."""

    def __init__(self) -> None:
        self.stats = {"reconnects": 0}
        self.is_connected = True
        self.published: list[tuple[str, list[str]]] = []

    async def publish(self, subject: str, payload: bytes, **_: Any) -> None:
        self.published.append((subject, decode(payload, ResendRequest).request_ids))


async def test_a_long_ask_is_split_into_messages_within_the_limit() -> None:
    """Test that more ids than one message holds go in several, every id once."""
    nc = _Nc()
    ids = [f"r{i}" for i in range(MAX_RESEND_IDS + 5)]
    assert await ask_resend(nc, S, "lg", ids) == len(ids)  # type: ignore[arg-type]
    assert [len(part) for _, part in nc.published] == [MAX_RESEND_IDS, 5]
    assert {subject for subject, _ in nc.published} == {S.resend("lg")}


async def test_the_client_asks_after_each_reconnect_and_once_more_later_only() -> None:
    """Test that nothing is asked while the connection stays, that a reconnect asks for
    the requests unanswered then, at once and once again a little later, and no more."""
    nc = _Nc()
    waiting = ["a", "b"]
    task = asyncio.create_task(
        resend_after_reconnects(nc, S, "lg", lambda: list(waiting), period_s=0.01)  # type: ignore[arg-type]
    )
    try:
        await asyncio.sleep(0.1)
        assert nc.published == []
        nc.stats["reconnects"] = 1
        await asyncio.sleep(0.1)
        assert nc.published == [(S.resend("lg"), ["a", "b"])]
        waiting.remove("a")  # answered meanwhile
        await asyncio.sleep(1.2)
        assert nc.published[1:] == [(S.resend("lg"), ["b"])]
        await asyncio.sleep(0.3)
        assert len(nc.published) == 2
    finally:
        task.cancel()
