"""A connection's client id: explicit, else its authenticated NATS user, else random."""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlparse

import pytest
from nats.aio.client import Client

from shared.security.client_ids import connection_client_id, instance_token, pick_client_id


class _Conn:
    def __init__(self, user: str | None = None, url: str = "nats://127.0.0.1:14222") -> None:
        self.options: dict[str, Any] = {"user": user}
        self.connected_url = urlparse(url)


def _nc(user: str | None = None, url: str = "nats://127.0.0.1:14222") -> Client:
    return cast(Client, _Conn(user, url))


def test_the_user_option_or_the_urls_user_is_the_client_id() -> None:
    """Test that user= wins, the URL's user counts too (replay's stack URL), none is None."""
    assert connection_client_id(_nc("gateway")) == "gateway"
    assert connection_client_id(_nc(url="nats://loadgen:secret@127.0.0.1:14222")) == "loadgen"
    assert connection_client_id(_nc()) is None
    assert connection_client_id(_nc("not.a.token")) is None  # never a subject with dots


def test_an_explicit_id_wins_and_an_open_stack_gets_a_random_one() -> None:
    """Test the order explicit > user > '<prefix>-<random>' and that bad ids are refused."""
    assert pick_client_id(_nc("loadgen"), "client-a", "lg") == "client-a"
    assert pick_client_id(_nc("loadgen"), None, "lg") == "loadgen"
    first, second = pick_client_id(_nc(), None, "lg"), pick_client_id(_nc(), None, "lg")
    assert first.startswith("lg-")
    assert second.startswith("lg-")
    assert first != second
    with pytest.raises(ValueError, match="subject token"):
        pick_client_id(_nc(), "a.b", "lg")
    assert instance_token() != instance_token()
