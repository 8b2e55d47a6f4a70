"""The live agent's profile mode: lengths learnt from completions, load, class SLOs."""

from __future__ import annotations

import asyncio
import math

import pytest

from services.dvfs.controller import LatencyWindow, Observation
from services.dvfs.profile_live import LoadMeter, ProfileBook, engine_key, live_profile_policy
from services.dvfs.profile_policy import ProfilePoint, ProfileTable
from shared.domain.classes import ClassSLO
from tests.factories import worker_stats

KEY = ("A100-80GB", "llama-3-8b", 1, 64)
CLOCKS = (210.0, 810.0, 1410.0)


def _table() -> ProfileTable:
    # TTFT 0.6 / 0.3 / 0.2 s and TBT 0.09 / 0.04 / 0.02 s by clock; power rises with clock.
    rows = ((210.0, 100.0, 0.6, 0.09), (810.0, 200.0, 0.3, 0.04), (1410.0, 300.0, 0.2, 0.02))
    return ProfileTable(
        [
            ProfilePoint(load_rps=load, clock_mhz=c, energy_j=p, ttft_s=t, tbt_s=g)
            for load in (1.0, 4.0)
            for c, p, t, g in rows
        ]
    )


async def test_the_book_sweeps_once_enough_lengths_are_seen_with_those_lengths() -> None:
    """Test that no profile exists before ``min_requests`` and one sweep runs after."""
    calls: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def build(key: object, prompts: tuple[int, ...], outputs: tuple[int, ...]) -> ProfileTable:
        calls.append((prompts, outputs))
        return _table()

    book = ProfileBook(3, build)
    book.add(KEY, "SS", 100, 50)
    book.add(KEY, "LM", 2000, 0)  # an empty output still counts one token in the profile
    assert book.get(KEY) is None
    assert not calls
    book.add(KEY, "SS", 120, 60)
    assert book.get(KEY) is None  # the sweep starts in a thread
    for _ in range(100):
        await asyncio.sleep(0.01)
        if book.get(KEY) is not None:
            break
    assert book.get(KEY) is not None
    assert calls == [((100, 2000, 120), (50, 1, 60))]
    assert book.classes(KEY) == {"SS", "LM"}
    book.close()


def test_the_load_is_completions_per_second_over_the_window() -> None:
    """Test the sliding window: old completions drop out, an unseen worker has no load."""
    meter = LoadMeter(5.0)
    for at in (0.5, 1.0, 4.0, 6.0, 9.5):
        meter.add("w0", at)
    assert meter.rate("w0", 10.0) == pytest.approx(2 / 5)  # 6.0 and 9.5
    assert meter.rate("w1", 10.0) == 0.0


def test_the_filter_takes_the_loosest_ttft_and_strictest_tbt_and_classes_keep_their_own() -> None:
    """Test the live SLO mapping and a per-class emergency."""
    slos = {
        "SS": ClassSLO(ttft_ms=250.0, tbt_ms=100.0),
        "LS": ClassSLO(ttft_ms=2000.0, tbt_ms=50.0),
    }
    policy = live_profile_policy(_table(), slos, frozenset({"SS", "LS"}), period_s=1.0)
    # Loosest TTFT 2 s keeps every clock; strictest TBT 50 ms drops 210 MHz.
    assert policy.choose_clock(2.0) == 810.0
    observation = Observation(
        now_s=0.0, clock_mhz=810.0, supported_clocks_mhz=CLOCKS, arrival_rate_rps=2.0
    )
    assert policy.decide(observation) == 810.0
    # 240 ms is far under LS's 2 s bound but within 10 % of SS's 250 ms: an emergency.
    late_short = Observation(
        now_s=0.0,
        clock_mhz=810.0,
        supported_clocks_mhz=CLOCKS,
        arrival_rate_rps=2.0,
        latencies={"SS": LatencyWindow(ttft_s=(0.24,)), "LS": LatencyWindow(ttft_s=(0.3,))},
    )
    assert policy.decide(late_short) == 1410.0
    assert math.isinf(policy.config.e2e_slo_s)  # live requests carry their own deadlines
    with pytest.raises(ValueError, match="no SLO"):
        live_profile_policy(_table(), slos, frozenset({"XL"}), period_s=1.0)


def test_the_engine_key_is_the_engines_limit_not_the_gate_lowered_one() -> None:
    """Test that a closed admission gate (max_num_seqs down to in-flight) keeps the key."""
    open_gate = worker_stats(max_num_seqs=64, engine_max_num_seqs=64)
    closed_gate = worker_stats(max_num_seqs=37, engine_max_num_seqs=64)
    assert engine_key(open_gate) == engine_key(closed_gate) == ("A100-80GB", "llama-3-8b", 1, 64)
    # A sender from before the field: its advertised limit is all there is.
    assert engine_key(worker_stats(max_num_seqs=48))[-1] == 48
