"""``greenserve bench planner-scale``: what its DynamoLLM-scale summary reports."""

from __future__ import annotations

import argparse

from rich.progress import Progress

from greenserve.bench import planner_scale
from services.planner.synthetic_profiles import dynamollm_configs


def test_integer_variables_counts_the_models_variables_not_every_profile_row() -> None:
    """Test that ``integer_variables`` is what Eq. 1 has after the SLO filter (Eq. 1e).

    With DynamoLLM's SLOs (TTFT 250/400/2000 ms, TBT 100 ms) 30 of the 189 synthetic rows
    fail, so the model has 159 x per region, not 189 (profile rows × regions).
    """
    args = argparse.Namespace(loads_qps=[20.0], nodes_per_region=2, regions=1, time_limit_s=10.0)
    with Progress(disable=True) as progress:
        out = planner_scale._dynamollm(progress, args)
    assert out["profile_rows"] == len(dynamollm_configs()) == 189
    assert out["integer_variables"] == 159
