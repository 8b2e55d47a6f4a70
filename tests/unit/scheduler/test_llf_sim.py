"""Tests for the tick simulator, including the FREESH Fig. 4 toy example."""

from __future__ import annotations

import numpy as np
import pytest

from greenserve.bench.llf.llf_sim import TickSimConfig, simulate_ticks
from services.scheduler.queueing import QueuedRequest, make_discipline
from shared.metrics import RecordColumns, gap_fairness, summarize

_TOY_CONFIG = TickSimConfig(slots=1, tick_s=1.0)  # one server, re-plan every second


def _toy_columns(policy: str) -> RecordColumns:
    # R0 at t=0 needs 10 tokens, R1 at t=1 needs 2, R2 at t=2 needs 1; 1 token/s.
    return simulate_ticks(
        policy,
        arrival_s=np.array([0.0, 1.0, 2.0]),
        true_output_tokens=np.array([10, 2, 1], dtype=np.int64),
        predicted_output_tokens=np.array([10, 2, 1], dtype=np.int64),
        ttft_s=np.zeros(3),
        tbt_s=np.ones(3),
        config=_TOY_CONFIG,
    ).columns


def _toy(policy: str) -> tuple[np.ndarray, np.ndarray]:
    columns = _toy_columns(policy)
    per_token = (columns.finish_s - columns.arrival_s) / columns.output_tokens
    return per_token, columns.first_token_s - columns.arrival_s


def test_fig4_llf_serves_r1_at_one_and_a_half_seconds_per_token() -> None:
    """Test that LLF gives R1 a latency of (4 − 1)/2 = 1.5 s/token (FREESH Fig. 4)."""
    per_token, _ = _toy("llf")
    assert per_token[1] == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("policy", "mean_latency", "ttfts"),
    [
        ("fcfs", 5.83, [1.0, 10.0, 11.0]),
        ("srtf", 1.43, [1.0, 1.0, 2.0]),
        ("llf", 1.27, [1.0, 1.0, 1.0]),
    ],
)
def test_fig4_mean_latency_and_ttft_match_the_seed_table(
    policy: str, mean_latency: float, ttfts: list[float]
) -> None:
    """Test mean per-token latency and per-request TTFT of the Fig. 4 toy per policy."""
    per_token, ttft = _toy(policy)
    assert round(float(per_token.mean()), 2) == mean_latency
    assert ttft.tolist() == ttfts


def test_llf_preempts_a_running_request_when_another_has_less_laxity() -> None:
    """Test that R0 loses its slot at t = 1 under LLF but keeps it under FCFS."""
    llf = _toy_columns("llf")
    fcfs = _toy_columns("fcfs")
    assert llf.token_times_flat is not None
    assert fcfs.token_times_flat is not None
    assert llf.token_times_flat[:2].tolist() == [1.0, 5.0]  # R0 paused while R1, R2 ran
    assert fcfs.token_times_flat[:2].tolist() == [1.0, 2.0]


def test_simulator_ranking_agrees_with_the_queue_discipline() -> None:
    """Test that one tick serves exactly the requests the LLF queue would pop first."""
    rng = np.random.default_rng(11)
    n = 60
    arrival = np.sort(rng.uniform(0, 1, n))
    tokens = rng.integers(5, 400, n).astype(np.int64)
    ttft, tbt = np.full(n, 0.14), np.full(n, 0.027)
    config = TickSimConfig(slots=7, tick_s=1.0)
    # At t = 1 every request has arrived and none has been served.
    result = simulate_ticks(
        "llf",
        arrival_s=arrival,
        true_output_tokens=tokens,
        predicted_output_tokens=tokens,
        ttft_s=ttft,
        tbt_s=tbt,
        config=config,
    )
    served_first = set(np.flatnonzero(np.isclose(result.columns.first_token_s, 2.0)))
    queue = make_discipline("llf")
    for i in range(n):
        queue.push(
            QueuedRequest(
                request_id=str(i),
                arrival_s=float(arrival[i]),
                prompt_tokens=1,
                predicted_output_tokens=int(tokens[i]),
                ttft_s=0.0,  # the simulator charges no prefill by default
                tbt_s=0.027,
            )
        )
    expected = {int(r.request_id) for r in queue.ordered(1.0)[:7]}
    assert served_first == expected


def test_every_token_is_produced_once_and_metrics_summarise_the_run() -> None:
    """Test token accounting and that the shared summary accepts simulator columns."""
    rng = np.random.default_rng(5)
    n = 40
    tokens = rng.integers(1, 200, n).astype(np.int64)
    result = simulate_ticks(
        "edf",
        arrival_s=np.cumsum(rng.exponential(1 / 15, n)),
        true_output_tokens=tokens,
        predicted_output_tokens=tokens,
        ttft_s=np.full(n, 0.14),
        tbt_s=np.full(n, 0.027),
        request_class="SS",
        config=TickSimConfig(slots=5, model_prefill=True),
    )
    columns = result.columns
    assert columns.token_times_flat is not None
    assert columns.token_times_flat.size == int(tokens.sum())
    assert (columns.first_token_s - columns.arrival_s >= 0.14 - 1e-9).all()  # prefill charged
    summary = summarize(columns)
    assert summary.per_class["SS"].completed == n
    produced = result.gap_fairness_produced
    assert produced.sum() == pytest.approx(float(tokens.sum()))
    assert 0.0 <= gap_fairness(produced, result.gap_fairness_backlogged) <= 1.0
