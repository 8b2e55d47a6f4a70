"""PNG plot of the control-plane bench (``greenserve bench control-plane --plots DIR``).

Added latency against the achieved rate, p50 and p99 for every run, with issue 7's goal
(2,000 req/s at p99 ≤ 5 ms) drawn in; the stack's CPU per request beside it, which shows the
wake-up cost falling as messages batch up under load; the cores of the busiest processes
by rate (one event loop each, so a process near one core is where requests queue); and,
with ``--hops``, the p99 of each hop by rate, both for the first deployment's median run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shared.metrics.plots import save_figure

__all__ = ["plot_control_plane"]

BUSIEST = 6
"""Processes drawn in the cores panel: the busiest at their peak step."""


def plot_control_plane(
    runs: Mapping[str, Sequence[Mapping[str, Any]]],
    primary: Mapping[str, Any],
    goal: Mapping[str, float],
    path: Path,
) -> Path:
    """Write the plot of every run's steps (``runs``: deployment → sweeps) to ``path``."""
    from shared.metrics.headless import plt

    hops = [s["hops"] for s in primary["steps"] if s.get("hops")]
    cores = _cores_by_process(primary["steps"])
    panels = 2 + bool(cores) + bool(hops)
    fig, axes = plt.subplots(1, panels, figsize=(5.4 * panels, 4), squeeze=False)
    latency, cpu = axes[0][0], axes[0][1]
    for deployment, sweeps in runs.items():
        for k, sweep in enumerate(sweeps, start=1):
            steps = [s for s in sweep["steps"] if s.get("p99_added_ms") is not None]
            label = f"{deployment} #{k}" if len(sweeps) > 1 else deployment
            rates = [s["achieved_rps"] for s in steps]
            line = latency.plot(
                rates, [s["p99_added_ms"] for s in steps], "o-", label=f"{label} p99"
            )
            latency.plot(
                rates,
                [s["p50_added_ms"] for s in steps],
                "s--",
                color=line[0].get_color(),
                label=f"{label} p50",
            )
            cpu.plot(rates, [s["cpu_ms_per_request"] for s in steps], "o-", label=label)
    latency.axhline(goal["p99_added_ms"], color="k", ls=":", label="goal p99")
    latency.axvline(goal["sustained_rps"], color="k", ls=":")
    latency.set_yscale("log")
    latency.set_title("added latency (instant workers)", fontsize=10)
    latency.set_xlabel("achieved req/s")
    latency.set_ylabel("ms")
    latency.legend(fontsize=7)
    cpu.set_title("stack CPU per request (idle included)", fontsize=10)
    cpu.set_xlabel("achieved req/s")
    cpu.set_ylabel("CPU ms / request")
    cpu.set_yscale("log")
    cpu.legend(fontsize=7)
    if cores:
        ax = axes[0][2]
        for name, (rates, values) in cores.items():
            ax.plot(rates, values, "o-", label=name)
        ax.axhline(1.0, color="k", ls=":", label="one core")
        ax.set_title("cores of the busiest processes", fontsize=10)
        ax.set_xlabel("achieved req/s")
        ax.set_ylabel("cores")
        ax.legend(fontsize=7)
    if hops:
        ax = axes[0][-1]
        rates = [s["achieved_rps"] for s in primary["steps"] if s.get("hops")]
        for name in hops[0]["p99_ms"]:
            ax.plot(rates, [h["p99_ms"][name] for h in hops], "o-", label=name)
        ax.set_title("p99 per hop", fontsize=10)
        ax.set_xlabel("achieved req/s")
        ax.set_ylabel("ms")
        ax.legend(fontsize=7, ncol=2)
    for ax in axes[0]:
        ax.grid(alpha=0.3)
    return save_figure(fig, path)


def _cores_by_process(
    steps: Sequence[Mapping[str, Any]],
) -> dict[str, tuple[list[float], list[float]]]:
    """(rates, cores) of the :data:`BUSIEST` processes, the load generator among them."""
    series: dict[str, tuple[list[float], list[float]]] = {}
    for step in steps:
        by_process = dict(step.get("cpu_cores_by_process") or {})
        if not by_process:
            continue
        by_process["load generator"] = step.get("loadgen_cpu_cores", 0.0)
        for name, value in by_process.items():
            rates, values = series.setdefault(name, ([], []))
            rates.append(step["achieved_rps"])
            values.append(value)
    busiest = sorted(series, key=lambda name: max(series[name][1]), reverse=True)[:BUSIEST]
    return {name: series[name] for name in busiest}
