"""The clock agent's line-JSON protocol over a local Unix socket, and its asyncio client.

The clock agent (``python -m services.clockd``, the only process of a node with the
privilege to lock GPU clocks) listens on a Unix socket (mode 0660). A client writes one
JSON object per line and reads one JSON reply per line, in order; a connection may carry
any number of requests. Requests (``op`` names the kind)::

    {"op": "lock", "gpus": [0, 1], "clock_mhz": 1200}
    {"op": "reset", "gpus": [0, 1]}
    {"op": "status", "gpus": []}            # [] or absent: every GPU of the node

Replies::

    {"ok": true, "applied_mhz": 1200, "snapped": false, "took_s": 0.0031, "message": "..."}
    {"ok": false, "reason": "out_of_range", "message": "3000 MHz is outside ..."}
    {"ok": true, "gpus": [{"index": 0, "sm_clock_mhz": 1200, "locked_mhz": 1200,
                            "supported_min_mhz": 210, "supported_max_mhz": 1980,
                            "unavailable": ""}]}

Reasons of a refusal: ``bad_request`` (not JSON, unknown op or field, line over
:data:`MAX_LINE_BYTES`), ``unknown_gpu``, ``out_of_range``, ``no_permission``,
``not_supported``, ``invalid_argument``, ``nvml_error``, ``nvml_unavailable``. The full
description is in ``docs/gpu-clocks.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

import msgspec

__all__ = [
    "MAX_LINE_BYTES",
    "AgentReply",
    "AgentRequest",
    "ClockAgentClient",
    "ClockAgentUnreachableError",
    "ClockStatus",
    "GpuState",
    "LockClock",
    "ResetClocks",
    "decode_request",
    "encode_line",
]

MAX_LINE_BYTES: Final = 4096
"""Longest request line the agent reads; a longer one is refused and the connection closed."""


class LockClock(msgspec.Struct, tag_field="op", tag="lock", forbid_unknown_fields=True):
    """Lock every GPU of one instance at one SM clock."""

    gpus: list[int]
    clock_mhz: float


class ResetClocks(msgspec.Struct, tag_field="op", tag="reset", forbid_unknown_fields=True):
    """Give GPUs back to the driver's default clocks."""

    gpus: list[int]


class ClockStatus(msgspec.Struct, tag_field="op", tag="status", forbid_unknown_fields=True):
    """Read the clock state of GPUs (none named: all of the node)."""

    gpus: list[int] = []


AgentRequest = LockClock | ResetClocks | ClockStatus


class GpuState(msgspec.Struct, frozen=True):
    """One GPU in a status reply."""

    index: int
    sm_clock_mhz: int | None
    locked_mhz: int | None
    supported_min_mhz: int | None
    supported_max_mhz: int | None
    unavailable: str = ""


class AgentReply(msgspec.Struct, frozen=True, omit_defaults=True):
    """The answer to one request."""

    ok: bool
    reason: str = ""
    message: str = ""
    applied_mhz: int | None = None
    snapped: bool = False
    took_s: float = 0.0
    """NVML time of the change (lock, reset)."""
    gpus: list[GpuState] = []


_request_decoder: Final = msgspec.json.Decoder(AgentRequest)
_reply_decoder: Final = msgspec.json.Decoder(AgentReply)
_encoder: Final = msgspec.json.Encoder()


def decode_request(line: bytes) -> AgentRequest:
    """Parse one request line.

    Raises:
        msgspec.DecodeError: not JSON, or not a request (unknown op, field or type).
    """
    request: AgentRequest = _request_decoder.decode(line)
    return request


def encode_line(message: AgentRequest | AgentReply) -> bytes:
    """One message as a JSON line."""
    return _encoder.encode(message) + b"\n"


class ClockAgentUnreachableError(ConnectionError):
    """The clock agent did not answer (not running, socket missing or denied, timed out)."""


class ClockAgentClient:
    """Sends requests to the clock agent, one connection per request.

    A connection per request costs well under a millisecond on a Unix socket, and a clock
    agent that restarted (it resets the clocks when it does) is reached by the next request
    without any reconnect logic.
    """

    def __init__(self, path: str, timeout_s: float = 5.0) -> None:
        """Talk to the agent listening on ``path``; give up after ``timeout_s`` per request."""
        self.path = path
        self._timeout_s = timeout_s

    async def request(self, request: AgentRequest) -> AgentReply:
        """Send one request and return its reply.

        Raises:
            ClockAgentUnreachableError: no answer (with the cause in the text).
        """
        try:
            async with asyncio.timeout(self._timeout_s):
                reader, writer = await asyncio.open_unix_connection(self.path)
                try:
                    writer.write(encode_line(request))
                    await writer.drain()
                    line = await reader.readline()
                finally:
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()
        except TimeoutError as exc:
            raise ClockAgentUnreachableError(
                f"the clock agent at {self.path} did not answer within {self._timeout_s:g} s"
            ) from exc
        except OSError as exc:
            raise ClockAgentUnreachableError(
                f"cannot reach the clock agent at {self.path}: {exc}"
            ) from exc
        if not line:
            raise ClockAgentUnreachableError(
                f"the clock agent at {self.path} closed the connection"
            )
        try:
            return _reply_decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise ClockAgentUnreachableError(
                f"the clock agent at {self.path} answered something else: {exc}"
            ) from exc

    async def lock(self, gpus: list[int], clock_mhz: float) -> AgentReply:
        """Lock ``gpus`` at ``clock_mhz``."""
        return await self.request(LockClock(gpus=gpus, clock_mhz=clock_mhz))

    async def reset(self, gpus: list[int]) -> AgentReply:
        """Reset ``gpus`` to default clocks."""
        return await self.request(ResetClocks(gpus=gpus))

    async def status(self, gpus: list[int] | None = None) -> AgentReply:
        """Clock state of ``gpus`` (default: all)."""
        return await self.request(ClockStatus(gpus=list(gpus or [])))
