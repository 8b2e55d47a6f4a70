"""Reading a request's body: its size limit, its time limit and its ``Content-Encoding``.

aiohttp's own decompression is off (``auto_decompress=False`` in :mod:`.service`): it
raised on a ``gzip`` header over bytes that are not gzip, which reached the client as a
500, and it inflated before any limit applied. Here the body is read as sent within
``max_body_bytes`` and ``body_timeout_s``, then decoded: ``identity`` (or no header) as
is, ``gzip`` inflated to at most ``max_body_bytes`` (a decompression bomb stops there and
gets 413), anything else 400 ``unsupported_encoding`` (``br`` and ``zstd`` would need
optional packages, and no OpenAI client compresses requests at all).
"""

from __future__ import annotations

import asyncio
import zlib
from typing import Final

from aiohttp import web

from services.gateway.errors import ApiError

__all__ = ["GZIP", "IDENTITY", "decode_body", "read_body", "send_and_close"]

IDENTITY: Final = frozenset({"", "identity"})
"""Codings that mean the bytes are the body."""
GZIP: Final = frozenset({"gzip", "x-gzip"})
"""Codings inflated as one gzip member (``x-gzip`` is RFC 9110's alias)."""
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
"""zlib's window setting that accepts the gzip wrapper and nothing else."""


async def read_body(request: web.Request, limit: int, timeout_s: float) -> bytes:
    """The request's decoded body.

    Raises:
        ApiError: ``body_too_large`` beyond ``limit`` bytes (as sent or decoded),
            ``body_timeout`` when it takes longer than ``timeout_s`` to arrive,
            ``unsupported_encoding`` / ``invalid_encoding`` for bytes it cannot decode.
    """
    if request.content_length is not None and request.content_length > limit:
        raise ApiError("body_too_large", f"body of {request.content_length} bytes > {limit}")
    try:
        async with asyncio.timeout(timeout_s):
            raw = await request.read()
    except TimeoutError:
        # A client trickling its body holds a connection and an admission slot: cut it off.
        raise ApiError("body_timeout", f"the body did not arrive within {timeout_s} s") from None
    except web.HTTPRequestEntityTooLarge:
        raise ApiError("body_too_large", f"body larger than {limit} bytes") from None
    return decode_body(raw, request.headers.get("Content-Encoding", ""), limit)


async def send_and_close(request: web.Request, response: web.Response) -> web.Response:
    """Send ``response`` now, then close the connection.

    For a body that timed out: its rest may still trickle in, and aiohttp would hold the
    connection for up to its ``lingering_time`` (10 s) reading it. A transport's close
    sends what was written before it closes.
    """
    await response.prepare(request)
    await response.write_eof()
    if request.transport is not None:
        request.transport.close()
    return response


def decode_body(raw: bytes, content_encoding: str, limit: int) -> bytes:
    """``raw`` decoded as ``content_encoding`` says, at most ``limit`` bytes.

    Raises:
        ApiError: an unsupported coding (several codings included), bytes that are not
            what the header says, or a decoded body over ``limit``.
    """
    coding = content_encoding.strip().lower()
    if coding in IDENTITY:
        return raw
    if coding not in GZIP:
        raise ApiError(
            "unsupported_encoding",
            f"Content-Encoding {content_encoding.strip()[:64]!r} is not supported: send the "
            "body as is (identity) or as gzip",
            param="Content-Encoding",
        )
    return _gunzip(raw, limit)


def _gunzip(raw: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(_GZIP_WBITS)
    try:
        # max_length bounds the output, so a bomb costs at most limit + 1 bytes of memory.
        body = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise ApiError(
            "invalid_encoding", f"the body is not valid gzip ({exc})", param="Content-Encoding"
        ) from None
    if len(body) > limit:
        raise ApiError("body_too_large", f"the body inflates to more than {limit} bytes")
    if not inflater.eof:
        raise ApiError("invalid_encoding", "the gzip body is cut short", param="Content-Encoding")
    if inflater.unused_data:
        # Concatenated members are legal gzip, but no HTTP client sends them; refusing keeps
        # the size bound to one pass over one member.
        raise ApiError(
            "invalid_encoding",
            "bytes after the gzip member (one member per body)",
            param="Content-Encoding",
        )
    return body
