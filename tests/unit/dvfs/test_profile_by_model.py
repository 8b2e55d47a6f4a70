"""The dvfs agent's profiles are per model: two models on one node never share one."""

from __future__ import annotations

import asyncio

from services.dvfs.profile_live import EngineKey, ProfileBook, ProfileControllers, engine_key
from services.dvfs.profile_policy import ProfilePoint, ProfileTable
from shared.domain.classes import ClassSLO
from tests.factories import worker_stats

POWER_W = {"llama-3-8b": 200.0, "llama-2-13b": 350.0}
"""A distinct profile per model, so the test can tell which one a worker got."""


def _table(model: str) -> ProfileTable:
    return ProfileTable(
        [
            ProfilePoint(load_rps=1.0, clock_mhz=c, energy_j=POWER_W[model] * c / 1410.0,
                         ttft_s=0.2, tbt_s=0.02)
            for c in (810.0, 1410.0)
        ]
    )  # fmt: skip


async def _profiled(book: ProfileBook, *keys: EngineKey) -> None:
    for _ in range(200):
        if all(book.get(k) is not None for k in keys):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the sweeps did not finish")


async def test_each_worker_gets_the_profile_of_its_own_model() -> None:
    """Test that workers of two models on one node are profiled with their own model's
    lengths and controlled by their own model's profile, and that a worker id that comes
    back serving the other model gets that model's profile."""
    built: list[tuple[EngineKey, tuple[int, ...]]] = []

    def build(key: EngineKey, prompts: tuple[int, ...], outputs: tuple[int, ...]) -> ProfileTable:
        built.append((key, prompts))
        return _table(key[1])

    small = worker_stats("w-small", model="llama-3-8b", engine_max_num_seqs=64)
    large = worker_stats("w-large", model="llama-2-13b", engine_max_num_seqs=64)
    key_small, key_large = engine_key(small), engine_key(large)
    assert key_small != key_large
    book = ProfileBook(2, build, drift_window=0)
    for prompt in (100, 110):
        book.add(key_small, "SS", prompt, 50)
    for prompt in (3000, 3100):
        book.add(key_large, "LS", prompt, 50)
    await _profiled(book, key_small, key_large)
    assert sorted(built) == sorted([(key_small, (100, 110)), (key_large, (3000, 3100))])

    slos = {c: ClassSLO(ttft_ms=1000.0, tbt_ms=100.0) for c in ("SS", "LS")}
    controllers = ProfileControllers(book, slos, period_s=1.0)
    assert controllers.get(small.worker_id, key_small) is not None
    assert controllers.get(large.worker_id, key_large) is not None
    assert controllers._built[small.worker_id][1] is book.get(key_small)
    assert controllers._built[large.worker_id][1] is book.get(key_large)
    # The small model's worker restarted under the same id serving the large model.
    assert controllers.get(small.worker_id, key_large) is not None
    assert controllers._built[small.worker_id][1] is book.get(key_large)
    assert controllers.rebuilds == 1
    book.close()
