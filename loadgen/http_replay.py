"""Replay a trace through the OpenAI-compatible HTTP gateway, open loop.

What an OpenAI client sees: each request is a ``POST /v1/completions`` sent at its arrival
time, whatever the earlier ones are doing (an open loop, as :func:`loadgen.replay.replay`
on NATS), to one of the given gateways drawn at random, as a load balancer over several
gateways would. The prompt is sized by the trace through the ``prompt_tokens`` extension
field and ``ignore_eos`` makes the stack generate exactly ``max_tokens``, so the request is
the same one :func:`loadgen.replay.replay` publishes. Non-streaming: the answer ends when
the response body has arrived.

A refused connection carried nothing, so a client may send the request again: with
``connect_retry_s`` the replay does, as OpenAI's client retries connection errors, until
the gateway listens again or that long has passed since the first try (the fault bench's
``kill:gateway``). A connection cut with the request on it is not retried: the gateway may
have handed it on, and a second send could run it twice.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from loadgen.traces import TraceRequest
from shared.loops import retry

__all__ = ["HttpRecord", "replay_http"]

CONNECT_BACKOFF_S = 0.05
MAX_CONNECT_BACKOFF_S = 1.0


@dataclass(slots=True)
class HttpRecord:
    """What the HTTP client saw of one request (wall-clock seconds)."""

    trace: TraceRequest
    url: str
    sent_at: float = 0.0
    ended_at: float = 0.0
    status: int | None = None
    """HTTP status; ``None`` when no response came (connection error, client timeout)."""
    completion_tokens: int = 0
    error: str = ""
    retries: int = 0
    """Sends again after a refused connection (``connect_retry_s``)."""
    retry_after: str = ""
    """The ``Retry-After`` header of a 429 (empty: none came)."""

    @property
    def ok(self) -> bool:
        """Answered 200 with every token asked for."""
        return self.status == 200 and self.completion_tokens == self.trace.output_tokens


async def replay_http(
    base_urls: Sequence[str],
    trace: Sequence[TraceRequest],
    *,
    model: str,
    seed: int = 0,
    timeout_s: float = 60.0,
    connect_retry_s: float = 0.0,
) -> list[HttpRecord]:
    """POST every request of ``trace`` at its arrival time (wall seconds from the start,
    after one untimed request per gateway) to a gateway of ``base_urls`` drawn at random;
    one record per request, in trace order. A request whose connection is refused is sent
    again, after 0.05 s doubling to 1 s, until ``connect_retry_s`` after its first send.

    Raises:
        ValueError: no gateway given.
    """
    if not base_urls:
        raise ValueError("replay_http needs at least one gateway URL")
    pick = random.Random(seed)
    records = [HttpRecord(tr, pick.choice(base_urls)) for tr in trace]
    # No connection limit: an open loop must not queue requests in the client's own pool.
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:

        async def send(record: HttpRecord) -> None:
            body = {
                "model": model,
                "prompt": "x",
                "max_tokens": record.trace.output_tokens,
                "prompt_tokens": record.trace.prompt_tokens,
                "ignore_eos": True,
            }

            def refused(_error: BaseException, _wait_s: float) -> None:
                record.retries += 1

            record.sent_at = time.time()
            try:
                await retry(
                    lambda: _post(http, record, body),
                    aiohttp.ClientConnectorError,
                    within_s=connect_retry_s,
                    first_backoff_s=CONNECT_BACKOFF_S,
                    max_backoff_s=MAX_CONNECT_BACKOFF_S,
                    on_retry=refused,
                )
            except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
                record.ended_at = time.time()
                record.error = type(exc).__name__

        # One request per gateway first, untimed: the step measures the steady state, not
        # the first connection's set-up (a NATS client is connected before its step too).
        for url in sorted(set(base_urls)):
            await send(HttpRecord(TraceRequest(0.0, 8, 1), url))
        started = time.time()
        tasks = []
        for record in records:
            delay = started + record.trace.t_s - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(send(record)))
        await asyncio.gather(*tasks)
    return records


async def _post(http: aiohttp.ClientSession, record: HttpRecord, body: dict[str, object]) -> None:
    async with http.post(f"{record.url}/v1/completions", json=body) as response:
        answer = await response.json()
        record.ended_at = time.time()
        record.status = response.status
        if response.status == 200:
            record.completion_tokens = int(answer["usage"]["completion_tokens"])
        else:
            record.error = str(answer.get("error", {}).get("code", ""))
            record.retry_after = response.headers.get("Retry-After", "")
