"""Replies of the bus, per request: routing to waiting handlers and token text.

One NATS subscription per gateway (its client wildcard) feeds every in-flight HTTP request;
the request id is the last token of the reply subject. A simulated worker sends token
times without text, so each token is rendered as a placeholder and the client still
receives exactly as many tokens as ``Completion.output_tokens`` says.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

import msgspec
from nats.aio.msg import Msg
from prometheus_client import Counter

from proto.codec import DecodeError, decode_any
from proto.messages import Completion, ErrorReply, TokenChunk

__all__ = ["ReplyRouter", "TokenText"]

LATE_ENDINGS: Final = Counter(
    "greenserve_gateway_late_endings_total",
    "Completions and errors for requests the gateway had already ended (repeats, or a "
    "second answer of a request run twice): dropped",
)

logger = logging.getLogger(__name__)


class ReplyRouter:
    """Hands each reply message to the queue of the request it belongs to."""

    def __init__(self) -> None:
        self._queues: dict[str, asyncio.Queue[msgspec.Struct]] = {}

    def __len__(self) -> int:
        return len(self._queues)

    def waiting(self) -> list[str]:
        """The ids of the requests still waiting for replies."""
        return list(self._queues)

    def open(self, request_id: str) -> asyncio.Queue[msgspec.Struct]:
        """Start collecting replies for ``request_id`` (before publishing it)."""
        queue: asyncio.Queue[msgspec.Struct] = asyncio.Queue()
        self._queues[request_id] = queue
        return queue

    def close(self, request_id: str) -> None:
        """Stop collecting; later replies for this id are dropped."""
        self._queues.pop(request_id, None)

    async def on_message(self, msg: Msg) -> None:
        """NATS callback for the client wildcard subscription."""
        request_id = msg.subject.rsplit(".", 1)[-1]
        queue = self._queues.get(request_id)
        if queue is None:
            # The HTTP request already ended (answered, client gone, timeout): dropped. An
            # ending here is a repeat (a worker's re-send after an outage, an ask after a
            # reconnect) or a second answer (a request run again after a partition, whose
            # first run's answer came late): counted, never delivered twice.
            with contextlib.suppress(DecodeError):
                if isinstance(decode_any(msg.data), Completion | ErrorReply):
                    LATE_ENDINGS.inc()
            return
        try:
            queue.put_nowait(decode_any(msg.data))
        except DecodeError as exc:
            logger.warning("undecodable reply for %s: %s", request_id, exc)


class TokenText:
    """Text of one request's tokens, each token once, in order of arrival."""

    def __init__(self, placeholder: str) -> None:
        self._placeholder = placeholder
        self._parts: list[str] = []
        self._seen = 0
        """One past the highest token index received (chunks may repeat after a restart)."""
        self._rendered = 0
        """Tokens given text so far."""
        self._real_text = False

    @property
    def text(self) -> str:
        """Everything rendered so far."""
        return "".join(self._parts)

    def add(self, chunk: TokenChunk) -> str:
        """Account a chunk; return the text of its tokens not seen before."""
        end = chunk.first_index + len(chunk.token_times)
        fresh = end - max(self._seen, chunk.first_index)
        if fresh <= 0:
            return ""
        self._seen = end
        self._rendered += fresh
        if chunk.text is not None:
            self._real_text = True
            new = chunk.text
        else:
            new = self._placeholder * fresh
        self._parts.append(new)
        return new

    def finish(self, output_tokens: int) -> str:
        """At completion, placeholders for tokens counted but never streamed."""
        missing = output_tokens - self._rendered
        if missing <= 0 or self._real_text:
            return ""
        self._rendered = output_tokens
        new = self._placeholder * missing
        self._parts.append(new)
        return new
