"""Drift of the served lengths: the KS test and the book's re-sweep."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from services.dvfs.background_builds import ImmediateBuilds
from services.dvfs.profile_drift import change_point, ks_critical, ks_statistic, length_drift
from services.dvfs.profile_live import ProfileBook, ProfileControllers
from services.dvfs.profile_policy import ProfilePoint, ProfileTable
from shared.domain.classes import ClassSLO

KEY = ("A100-80GB", "llama-3-8b", 1, 64)


def test_the_statistic_matches_scipy_with_ties() -> None:
    """Test the two-sample KS statistic against scipy's on integer samples with many ties."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        a = rng.integers(1, 40, size=int(rng.integers(5, 300))).tolist()
        b = rng.integers(5, 60, size=int(rng.integers(5, 300))).tolist()
        assert ks_statistic(a, b) == pytest.approx(stats.ks_2samp(a, b).statistic, abs=1e-12)


def test_the_critical_value_is_the_asymptotic_one() -> None:
    """Test c(alpha)·sqrt((n+m)/(n·m)); at alpha 0.05 and n = m = 100 the textbook 0.192."""
    assert ks_critical(100, 100, 0.05) == pytest.approx(0.1921, abs=1e-3)
    assert ks_critical(256, 4096) < ks_critical(256, 256) < ks_critical(64, 256)
    with pytest.raises(ValueError):
        ks_critical(0, 5)


def test_the_same_mix_rarely_drifts_and_another_always_does() -> None:
    """Test false alarms on same-distribution windows and detection of a new mix."""
    rng = np.random.default_rng(0)

    def chat(n: int) -> tuple[list[int], list[int]]:
        return rng.lognormal(6.0, 1.0, n).astype(int).tolist(), rng.integers(20, 400, n).tolist()

    def code(n: int) -> tuple[list[int], list[int]]:
        return rng.lognormal(7.5, 0.8, n).astype(int).tolist(), rng.integers(5, 60, n).tolist()

    swept = chat(1024)
    false_alarms = sum(length_drift(swept, chat(256)).drifted for _ in range(200))
    assert false_alarms <= 3  # expected 2·0.001·200 = 0.4
    assert all(length_drift(swept, code(256)).drifted for _ in range(50))


def _table() -> ProfileTable:
    return ProfileTable(
        [ProfilePoint(load_rps=1.0, clock_mhz=1410.0, energy_j=1.0, ttft_s=0.1, tbt_s=0.01)]
    )


def test_the_book_sweeps_again_with_the_new_window_when_the_mix_moves() -> None:
    """Test one sweep per drift, with the latest window's lengths and classes, and none when
    the mix stays or drift testing is off."""
    sweeps: list[tuple[int, ...]] = []

    def build(key: object, prompts: tuple[int, ...], outputs: tuple[int, ...]) -> ProfileTable:
        sweeps.append(prompts)
        return _table()

    rng = np.random.default_rng(1)
    book = ProfileBook(64, build, drift_window=128, builds=ImmediateBuilds())
    off = ProfileBook(64, build, drift_window=0, builds=ImmediateBuilds())
    for _n in range(64 + 4 * 128):  # the first sweep, then four windows of the same mix
        prompt = int(rng.integers(100, 400))
        for b in (book, off):
            b.add(KEY, "chat", prompt, 100)
            b.get(KEY)
    assert len(sweeps) == 2
    assert book.resweeps == 0
    first = book.get(KEY)
    for _ in range(128):
        book.add(KEY, "code", int(rng.integers(3000, 6000)), 20)
        off.add(KEY, "code", int(rng.integers(3000, 6000)), 20)
        book.get(KEY)
        off.get(KEY)
    assert book.resweeps == 1
    assert len(sweeps) == 3
    assert min(sweeps[-1]) >= 3000  # swept with the code window only
    assert book.get(KEY) is not first
    assert book.classes(KEY) == {"code"}
    assert off.resweeps == 0
    assert off.classes(KEY) == {"chat", "code"}


def test_the_change_point_is_found_inside_a_window_and_not_in_a_steady_one() -> None:
    """Test that a window whose mix changes at completion 150 of 256 splits within a few
    completions of it, significantly, and that a steady window's best split is not
    significant (nor is any in 100 steady windows more than a handful of times)."""
    rng = np.random.default_rng(5)
    found = []
    for _ in range(20):
        prompts = rng.lognormal(6.0, 1.0, 150).astype(int).tolist()
        prompts += rng.lognormal(7.5, 0.8, 106).astype(int).tolist()
        outputs = rng.integers(20, 400, 256).tolist()
        split = change_point(prompts, outputs)
        assert split is not None
        assert split.significant
        found.append(split.index)
    assert all(abs(k - 150) <= 8 for k in found), found
    steady = [
        change_point(
            rng.lognormal(6.0, 1.0, 256).astype(int).tolist(), rng.integers(20, 400, 256).tolist()
        )
        for _ in range(100)
    ]
    assert sum(1 for c in steady if c is not None and c.significant) <= 5
    assert change_point([1] * 63, [1] * 63) is None  # too short for two 32-long sides
    with pytest.raises(ValueError):
        change_point([1, 2], [1])


def test_a_window_straddling_the_change_resweeps_with_what_came_after_it() -> None:
    """Test that the re-sweep of a window that holds both mixes uses the new mix only: at
    once when enough of it came after the change, else once enough has."""
    sweeps: list[tuple[int, ...]] = []

    def build(key: object, prompts: tuple[int, ...], outputs: tuple[int, ...]) -> ProfileTable:
        sweeps.append(prompts)
        return _table()

    rng = np.random.default_rng(2)
    # 200 or 100 code completions end the window: either is a drift (KS ≥ 0.39 > 0.21), and
    # the second is fewer than the 128 a sweep needs.
    for chat_in_window, swept_at_once in ((56, True), (156, False)):
        sweeps.clear()
        book = ProfileBook(128, build, drift_window=256, builds=ImmediateBuilds())
        for _ in range(128 + chat_in_window):  # the first sweep, then chat into the window
            book.add(KEY, "chat", int(rng.integers(100, 400)), 100)
            book.get(KEY)
        for _ in range(256 - chat_in_window):
            book.add(KEY, "code", int(rng.integers(3000, 6000)), 20)
            book.get(KEY)
        assert book.resweeps == 1
        assert len(sweeps) == (2 if swept_at_once else 1)
        for _ in range(128):
            book.add(KEY, "code", int(rng.integers(3000, 6000)), 20)
            book.get(KEY)
        assert len(sweeps) == 2
        assert min(sweeps[-1]) >= 3000, chat_in_window  # no chat lengths in the new profile
        assert len(sweeps[-1]) >= 128
        assert book.classes(KEY) == {"code"}


def test_a_workers_policy_is_rebuilt_on_a_new_profile_or_a_new_class_only() -> None:
    """Test that ProfileControllers keeps a worker's policy until its profile or classes
    change, and gives each worker its own."""
    slos = {name: ClassSLO(ttft_ms=300.0, tbt_ms=100.0) for name in ("chat", "code", "rag")}
    book = ProfileBook(16, lambda key, p, o: _table(), drift_window=16, builds=ImmediateBuilds())
    policies = ProfileControllers(book, slos, period_s=5.0)
    assert policies.get("w0", KEY) is None  # nothing served yet
    for _ in range(16):
        book.add(KEY, "chat", 200, 100)
    first = policies.get("w0", KEY)
    assert first is not None
    assert policies.get("w0", KEY) is first
    assert policies.get("w1", KEY) is not first
    book.add(KEY, "rag", 200, 100)  # a new class: the filter's SLOs change
    with_rag = policies.get("w0", KEY)
    assert with_rag is not first
    for _ in range(15):
        book.add(KEY, "rag", 200, 100)  # the same lengths: no drift, the same policy
    assert policies.get("w0", KEY) is with_rag
    for name in ("chat", "rag") * 8:  # long prompts, the same classes: only the profile changes
        book.add(KEY, name, 5000, 10)
    assert policies.get("w0", KEY) is not with_rag  # drifted: swept again
    assert book.classes(KEY) == {"chat", "rag"}
    assert book.resweeps == 1
    assert policies.rebuilds == 2
