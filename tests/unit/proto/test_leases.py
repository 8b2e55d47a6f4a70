"""The dispatch lease header (``proto/leases.py``) and the setting it comes from."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proto.codec import DecodeError
from proto.leases import LEASE_HEADER, lease_expiry, lease_headers
from shared.config import RouterSettings


def test_a_lease_header_reads_back_as_its_expiry() -> None:
    """Test that the header the router sets gives the worker the same expiry (to 1 µs)."""
    assert lease_expiry(lease_headers(1_700_000_000.123456)) == pytest.approx(
        1_700_000_000.123456, abs=1e-6
    )


@pytest.mark.parametrize("headers", [None, {}, {"traceparent": "00-ab-cd-01"}])
def test_a_dispatch_without_the_header_has_no_lease(headers: dict[str, str] | None) -> None:
    """Test that a router without leases (no header) gives a dispatch no expiry."""
    assert lease_expiry(headers) is None


@pytest.mark.parametrize("value", ["soon", "nan", "inf", "-5", "0", ""])
def test_a_malformed_lease_is_a_decode_error(value: str) -> None:
    """Test that a lease that is not a positive finite time is refused with a clear error."""
    with pytest.raises(DecodeError, match=LEASE_HEADER):
        lease_expiry({LEASE_HEADER: value})


def test_a_lease_no_longer_than_the_worker_timeout_is_refused() -> None:
    """Test that ``router.lease_s`` must exceed ``router.worker_timeout_s``: a shorter lease
    would drop dispatches to workers the router still counts alive."""
    with pytest.raises(ValidationError, match="lease_s"):
        RouterSettings(worker_timeout_s=30.0, lease_s=10.0)
    assert RouterSettings(worker_timeout_s=30.0, lease_s=60.0).lease_s == 60.0
