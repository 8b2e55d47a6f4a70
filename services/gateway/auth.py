"""OpenAI-style API keys: ``Authorization: Bearer <key>``, checked by hash, limited per key.

With ``gateway.api_keys_file`` set (``greenserve up --secure`` sets it), every route but
``/healthz``, ``/readyz``, ``/health`` and ``/metrics`` needs a key from that file: a missing
or wrong one is 401 ``invalid_api_key`` and a key over its requests-per-minute is 429
``rate_limit_exceeded`` with ``Retry-After``, both in OpenAI's error shape. Without the file
(the local demo) any key or none passes.

A presented key is hashed and compared with every entry in constant time, with no early
exit, so neither the answer's timing nor the file's order tells a guesser how close a key
came. The rate limit is a token bucket per key holding one minute's requests: a client
may spend its minute at once, then gets a request back every ``60 / limit`` seconds.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from aiohttp import web

from services.gateway.errors import ApiError
from services.gateway.state import STATE, error_response
from shared.security.api_keys import ApiKeyEntry, hash_api_key

__all__ = ["OPEN_PATHS", "KeyRing", "TokenBucket", "authenticate"]

OPEN_PATHS: Final = frozenset({"/healthz", "/readyz", "/health", "/metrics"})
"""Routes a probe or a scraper reaches without a key."""


class TokenBucket:
    """``capacity`` tokens, refilled at ``rate_per_s``; a request takes one."""

    def __init__(self, capacity: float, rate_per_s: float, now: float) -> None:
        self._capacity = capacity
        self._rate_per_s = rate_per_s
        self._tokens = capacity
        self._at = now

    def take(self, now: float) -> float:
        """Take a token at ``now``: 0.0 when one was there, else the seconds until one is."""
        self._tokens = min(self._capacity, self._tokens + (now - self._at) * self._rate_per_s)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self._rate_per_s


class KeyRing:
    """The accepted keys (by hash) and each one's bucket."""

    def __init__(self, entries: Sequence[ApiKeyEntry], default_requests_per_min: int) -> None:
        if not entries:
            raise ValueError("a key ring needs at least one key")
        self._entries = tuple(entries)
        self._default = default_requests_per_min
        self._buckets: dict[str, TokenBucket] = {}

    def identify(self, presented: str) -> ApiKeyEntry | None:
        """The entry of ``presented``, or ``None``; compares with every entry alike."""
        digest = hash_api_key(presented)
        found: ApiKeyEntry | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.sha256, digest) and found is None:
                found = entry
        return found

    def wait_s(self, entry: ApiKeyEntry, now: float) -> float:
        """Spend one of ``entry``'s requests at ``now``: 0.0, or the seconds to wait."""
        per_min = entry.requests_per_min or self._default
        if not per_min:
            return 0.0
        bucket = self._buckets.get(entry.name)
        if bucket is None:
            bucket = self._buckets[entry.name] = TokenBucket(per_min, per_min / 60.0, now)
        return bucket.take(now)


def _bearer(header: str) -> str | None:
    scheme, _, credentials = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return None
    return credentials.strip()


def _unauthorized(message: str) -> web.Response:
    response = error_response(ApiError("invalid_api_key", message))
    response.headers["WWW-Authenticate"] = 'Bearer realm="greenserve"'
    return response


@web.middleware
async def authenticate(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """401 without a listed key, 429 over its rate; else the route (keys off: the route)."""
    state = request.app[STATE]
    ring = state.api_keys
    if ring is None or request.path in OPEN_PATHS:
        return await handler(request)
    presented = _bearer(request.headers.get("Authorization", ""))
    if presented is None:
        return _unauthorized(
            "You didn't provide an API key: send it as 'Authorization: Bearer <key>'"
        )
    entry = ring.identify(presented)
    if entry is None:
        # The key is not echoed: a mistyped real key would end up in logs.
        return _unauthorized("Incorrect API key provided")
    wait_s = ring.wait_s(entry, time.monotonic())
    if wait_s > 0.0:
        return error_response(
            ApiError(
                "rate_limit_exceeded",
                f"Rate limit reached for key {entry.name}; try again in {wait_s:.1f} s",
                retry_after_s=wait_s,
            )
        )
    return await handler(request)
