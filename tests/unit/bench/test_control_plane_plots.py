"""The control-plane bench's plot, from sweeps shaped as the bench reports them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from greenserve.bench.control_plane.plots import plot_control_plane
from greenserve.bench.control_plane.run import HOPS

PNG = b"\x89PNG\r\n\x1a\n"
GOAL = {"sustained_rps": 2000.0, "p99_added_ms": 5.0}


def _sweep(scale: float, hops: bool) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for rate in (100.0, 1000.0, 2000.0):
        step: dict[str, Any] = {
            "offered_rps": rate,
            "achieved_rps": rate * 0.99,
            "p50_added_ms": scale * (2 + rate / 1000),
            "p99_added_ms": scale * (4 + rate / 250),
            "cpu_ms_per_request": 300 / rate,
            "loadgen_cpu_cores": rate / 4000,
            "cpu_cores_by_process": {"requestpath": rate / 2200, "nats": rate / 5000},
        }
        if hops:
            step["hops"] = {"p99_ms": {name: scale * rate / 1000 for name, *_ in HOPS}}
        steps.append(step)
    # A step where nothing completed reports no percentile; the plot leaves it out.
    steps.append({"offered_rps": 2400.0, "achieved_rps": 0.0, "p50_added_ms": None,
                  "p99_added_ms": None, "cpu_ms_per_request": 0.0})  # fmt: skip
    return {"steps": steps}


@pytest.mark.parametrize("hops", [False, True], ids=["plain", "hops"])
def test_the_plot_draws_every_run_and_the_hops_when_stamped(hops: bool, tmp_path: Path) -> None:
    """Test an A/B of two deployments, two runs each, with and without per-hop stamps."""
    runs = {
        "colocated": [_sweep(1.0, hops), _sweep(1.2, hops)],
        "separate": [_sweep(1.5, hops), _sweep(1.6, hops)],
    }
    path = plot_control_plane(runs, runs["colocated"][0], GOAL, tmp_path / "cp.png")
    assert path.read_bytes().startswith(PNG)
    assert path.stat().st_size > 10_000


def test_the_cores_panel_keeps_the_busiest_processes_and_the_load_generator() -> None:
    """Test that the panel's series are the busiest processes at their peak, the load
    generator counted as one, and that steps without per-process CPU are left out."""
    from greenserve.bench.control_plane.plots import BUSIEST, _cores_by_process

    quiet = {f"quiet-{i}": 0.01 for i in range(BUSIEST)}
    steps: list[dict[str, Any]] = [
        {"achieved_rps": 100.0, "loadgen_cpu_cores": 0.05,
         "cpu_cores_by_process": {"requestpath": 0.1, "nats": 0.05, **quiet}},
        {"achieved_rps": 2000.0, "loadgen_cpu_cores": 0.5,
         "cpu_cores_by_process": {"requestpath": 0.9, "nats": 0.4, **quiet}},
        {"achieved_rps": 2400.0},  # an older report: no per-process CPU
    ]  # fmt: skip
    series = _cores_by_process(steps)
    assert len(series) == BUSIEST
    assert list(series)[:3] == ["requestpath", "load generator", "nats"]
    assert series["requestpath"] == ([100.0, 2000.0], [0.1, 0.9])
