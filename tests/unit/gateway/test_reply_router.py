"""The gateway's reply router: replies to waiting requests, and late endings dropped."""

from __future__ import annotations

from dataclasses import dataclass

from proto.codec import encode
from proto.messages import Completion, TokenChunk
from services.gateway.replies import LATE_ENDINGS, ReplyRouter


@dataclass
class _Msg:
    subject: str
    data: bytes


def _completion(rid: str, worker: str) -> Completion:
    return Completion(
        request_id=rid,
        worker_id=worker,
        pool_id="p",
        region="PJM",
        request_class="SS",
        input_tokens=1,
        output_tokens=1,
        sent_at=1.0,
        accepted_at=1.1,
        first_token_at=1.2,
        finished_at=1.3,
        energy_j=0.0,
    )


async def test_an_ending_after_the_request_ended_is_dropped_and_counted() -> None:
    """Test that replies reach the queue of a waiting request, that ``waiting`` names the
    requests still open (what a reconnected gateway asks for again), and that once closed,
    a second answer is dropped and counted as a late ending while a chunk is not counted."""
    router = ReplyRouter()
    queue = router.open("r1")
    router.open("r2")
    assert sorted(router.waiting()) == ["r1", "r2"]
    await router.on_message(_Msg("gs.v1.client.gw.r1", encode(_completion("r1", "w0"))))  # type: ignore[arg-type]
    assert queue.qsize() == 1
    router.close("r1")
    assert router.waiting() == ["r2"]
    before = LATE_ENDINGS._value.get()
    late = _completion("r1", "w1")  # the same request's answer from its first run
    await router.on_message(_Msg("gs.v1.client.gw.r1", encode(late)))  # type: ignore[arg-type]
    chunk = TokenChunk(request_id="r1", worker_id="w1", first_index=0, token_times=[1.0])
    await router.on_message(_Msg("gs.v1.client.gw.r1", encode(chunk)))  # type: ignore[arg-type]
    assert LATE_ENDINGS._value.get() - before == 1
    assert queue.qsize() == 1
