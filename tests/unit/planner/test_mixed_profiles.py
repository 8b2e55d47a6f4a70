"""Tests of the mixed-class capacity measurement and the de-rating of profile rows."""

from __future__ import annotations

import pytest

from services.planner.mixed_profiles import (
    MixedLoad,
    MixRequest,
    class_shares,
    derate_rows,
    measure_mix,
    model_capacity,
)
from shared.domain.classes import default_slos, scheme_by_name
from shared.engine.api import EngineConfig
from tests.unit.planner.helpers import config

SHORT = MixRequest(200, 100, "SM")
LONG = MixRequest(6000, 100, "LM")
SLO_MS = {c: (s.ttft_ms, s.tbt_ms) for c, s in default_slos(scheme_by_name("dynamollm9")).items()}


def test_model_capacity_is_the_harmonic_mix_of_the_class_rows() -> None:
    """Test that the slice model's mixed capacity is 1 / Σ w_r / L̄_r, and 0 without a row."""
    rows = [config(cls="SS", qps=4.0), config(cls="LL", qps=1.0)]
    assert model_capacity(rows, {"SS": 0.5, "LL": 0.5}) == pytest.approx(1.0 / (0.125 + 0.5))
    assert model_capacity(rows, {"SS": 0.5, "MM": 0.5}) == 0.0
    assert class_shares([SHORT, SHORT, SHORT, LONG]) == {"SM": 0.75, "LM": 0.25}


def test_long_prefills_in_the_mix_break_the_short_requests_ttft_tail() -> None:
    """Test that short requests meet their TTFT alone but miss it beside long prompts."""
    engine = EngineConfig(gpu="A100-80GB", model="llama-3-70b", tp=4, max_num_seqs=64)
    load = MixedLoad(goal=0.9, window_s=60.0)
    alone = measure_mix(engine, [SHORT], 1.0, load)
    mixed = measure_mix(engine, [SHORT, LONG], 1.0, load)
    assert alone.ttft_quantile_ms("SM", 0.99) <= SLO_MS["SM"][0]
    assert mixed.ttft_quantile_ms("SM", 0.99) > SLO_MS["SM"][0]
    assert mixed.attainment(SLO_MS) < alone.attainment(SLO_MS)


def test_rows_are_scaled_per_clock_and_group_by_the_measured_ratio() -> None:
    """Test that each group's rows share one κ = measured / modelled capacity."""
    rows = tuple(
        config(cls=cls, gpu="H100", tp=4, clock=1980.0, qps=qps, ttft=50.0)
        for cls, qps in (("SM", 8.0), ("LM", 2.0))
    )
    mix = [SHORT] * 3 + [LONG]
    scaled, found = derate_rows(
        rows, gpu="H100-80GB", model="llama-3-70b", scheme="dynamollm9", max_num_seqs=64,
        mix=mix, load=MixedLoad(goal=0.9, window_s=30.0), groups={"SM": "short", "LM": "long"},
    )  # fmt: skip
    assert {c.group for c in found} == {"short", "long"}
    for capacity in found:
        assert capacity.measured_qps > 0
        assert capacity.derating == pytest.approx(capacity.measured_qps / capacity.model_qps)
        cls = "SM" if capacity.group == "short" else "LM"
        before = next(r for r in rows if r.request_class == cls)
        after = next(r for r in scaled if r.request_class == cls)
        assert after.max_qps == pytest.approx(before.max_qps * capacity.derating, abs=1e-4)
