"""The store marker's failover rule: write back after a promotion, not after a restart."""

from __future__ import annotations

from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import NoPermissionError

from shared.store_marker import write_back_if_lost


class _Store:
    """What the marker check asks of Redis: GET, SET and INFO replication."""

    def __init__(self, replid: str, replid2: str = "0" * 40) -> None:
        self.values: dict[str, bytes] = {}
        self.replid, self.replid2 = replid, replid2
        self.info_refused = False

    async def get(self, key: str) -> bytes | None:
        return self.values.get(key)

    async def set(self, key: str, value: str) -> None:
        self.values[key] = value.encode()

    async def info(self, section: str) -> dict[str, Any]:
        assert section == "replication"
        if self.info_refused:
            raise NoPermissionError("NOPERM this user has no permissions to run 'info'")
        return {"master_replid": self.replid, "master_replid2": self.replid2}


async def _check(store: _Store, follow: bool = True) -> int:
    async def write_back() -> int:
        return 7

    return await write_back_if_lost(cast(Redis, store), "m", write_back, follow_failover=follow)


async def test_a_promoted_replica_that_names_the_markers_primary_gets_the_write_back() -> None:
    """Test: marker set under primary A; the replica promoted reports A as its previous id."""
    store = _Store("A")
    assert await _check(store) == 7  # no marker: the first check writes back
    assert store.values["m"] == b"A"
    assert await _check(store) == 0
    store.replid, store.replid2 = "B", "A"
    assert await _check(store) == 7
    assert store.values["m"] == b"B"
    assert await _check(store) == 0


async def test_a_new_id_without_the_old_one_is_a_restart_and_only_moves_the_marker() -> None:
    """Test that a primary restarted on its append-only file (new id, no previous one) is
    not taken for a failover, and an older marker without an id is adopted quietly."""
    store = _Store("A")
    store.values["m"] = b"1"
    assert await _check(store) == 0
    assert store.values["m"] == b"A"
    store.replid = "C"
    assert await _check(store) == 0
    assert store.values["m"] == b"C"


async def test_without_failover_or_without_info_only_a_lost_marker_counts() -> None:
    """Test that a client not following Sentinels never asks INFO, and one refused INFO
    (an ACL) falls back to the lost-marker rule."""
    store = _Store("A")
    store.info_refused = True
    assert await _check(store) == 7
    store.replid, store.replid2 = "B", "A"
    assert await _check(store) == 0
    assert await _check(store, follow=False) == 0
    del store.values["m"]
    assert await _check(store, follow=False) == 7
