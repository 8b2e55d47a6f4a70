"""The gateway's pure hardening parts: body decoding, the ceiling, the key ring's buckets."""

from __future__ import annotations

import gzip
import zlib

import pytest

from services.gateway.admission import InFlightLimit, default_max_in_flight
from services.gateway.auth import KeyRing, TokenBucket, _bearer
from services.gateway.body import decode_body
from services.gateway.errors import ApiError
from shared.security.api_keys import ApiKeyEntry, hash_api_key

LIMIT = 1024


def _code(raw: bytes, coding: str) -> str:
    with pytest.raises(ApiError) as caught:
        decode_body(raw, coding, LIMIT)
    return caught.value.code


def test_identity_and_gzip_bodies_decode_to_the_same_bytes() -> None:
    """Test that no header, ``identity`` and ``gzip`` (any case, ``x-gzip``) give the body."""
    body = b'{"model": "m"}'
    for coding in ("", "identity", " Identity "):
        assert decode_body(body, coding, LIMIT) == body
    for coding in ("gzip", "GZIP", "x-gzip"):
        assert decode_body(gzip.compress(body), coding, LIMIT) == body


def test_bytes_that_are_not_what_the_header_says_are_invalid_encoding() -> None:
    """Test that plain bytes, a cut gzip, zlib (deflate) and trailing bytes under ``gzip``
    are ``invalid_encoding``, each a 400."""
    packed = gzip.compress(b"{}")
    for raw in (b"{}", packed[:-4], zlib.compress(b"{}"), packed + b"x", packed + packed):
        assert _code(raw, "gzip") == "invalid_encoding", raw
    assert ApiError("invalid_encoding", "").status == 400


def test_unknown_and_stacked_codings_are_unsupported() -> None:
    """Test that ``br``, ``zstd``, ``deflate`` and ``gzip, gzip`` are ``unsupported_encoding``."""
    for coding in ("br", "zstd", "deflate", "gzip, gzip", "compress"):
        assert _code(b"{}", coding) == "unsupported_encoding", coding


def test_a_decompression_bomb_stops_at_the_limit_with_413() -> None:
    """Test that a body inflating past the limit is 413, and one exactly at it passes."""
    assert decode_body(gzip.compress(b"a" * LIMIT), "gzip", LIMIT) == b"a" * LIMIT
    with pytest.raises(ApiError) as caught:
        decode_body(gzip.compress(b"a" * (100 * LIMIT)), "gzip", LIMIT)
    assert (caught.value.code, caught.value.status) == ("body_too_large", 413)


def test_the_ceiling_refuses_over_its_limit_with_retry_after_and_frees_on_leave() -> None:
    """Test that the limit's next request is 429 ``overloaded`` with ``Retry-After`` and a
    released place is taken again."""
    limit = InFlightLimit(2, retry_after_s=1.0)
    limit.enter()
    limit.enter()
    with pytest.raises(ApiError) as caught:
        limit.enter()
    assert (caught.value.status, caught.value.code) == (429, "overloaded")
    assert caught.value.headers() == {"Retry-After": "1", "retry-after-ms": "1000"}
    assert caught.value.body()["error"]["type"] == "requests"
    limit.leave()
    limit.enter()
    assert limit.held == 2


def test_the_default_ceiling_is_half_the_open_file_limit() -> None:
    """Test that the default ceiling follows the process's soft open-file limit."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        assert default_max_in_flight() == max(1, soft // 2)


def test_a_token_bucket_spends_a_minute_then_refills_at_its_rate() -> None:
    """Test that a 60/min bucket gives 60 at once, then one a second, and says how long."""
    bucket = TokenBucket(60.0, 1.0, now=0.0)
    assert all(bucket.take(0.0) == 0.0 for _ in range(60))
    assert bucket.take(0.0) == pytest.approx(1.0)
    assert bucket.take(0.5) == pytest.approx(0.5)
    assert bucket.take(1.0) == 0.0
    assert bucket.take(1000.0) == 0.0  # refilled, but never past its capacity:
    assert sum(bucket.take(1000.0) == 0.0 for _ in range(100)) == 59


def test_the_key_ring_finds_keys_by_hash_and_limits_each_on_its_own() -> None:
    """Test that only a listed key is found, and each key has its own bucket and limit."""
    ring = KeyRing(
        [
            ApiKeyEntry("a", hash_api_key("sk-a"), 1),
            ApiKeyEntry("b", hash_api_key("sk-b"), None),
        ],
        default_requests_per_min=0,
    )
    a = ring.identify("sk-a")
    b = ring.identify("sk-b")
    assert a is not None
    assert b is not None
    assert (a.name, b.name) == ("a", "b")
    assert ring.identify("sk-c") is None
    assert ring.identify("") is None
    assert ring.wait_s(a, 0.0) == 0.0
    assert ring.wait_s(a, 1.0) == pytest.approx(59.0)
    assert all(ring.wait_s(b, 0.0) == 0.0 for _ in range(1000))  # no limit: none
    limited = KeyRing([ApiKeyEntry("b", hash_api_key("sk-b"), None)], 2)
    assert [limited.wait_s(b, 0.0) > 0 for _ in range(3)] == [False, False, True]


def test_only_a_bearer_header_carries_a_key() -> None:
    """Test that ``Bearer <key>`` (any case) gives the key and anything else none."""
    assert _bearer("Bearer sk-x") == "sk-x"
    assert _bearer("bearer  sk-x ") == "sk-x"
    for header in ("", "Bearer", "Bearer  ", "Basic c2s=", "sk-x"):
        assert _bearer(header) is None, header
