"""Run several policy sets over one trace, with a progress bar on stderr."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from loadgen.simulator.cluster import simulate
from loadgen.simulator.policies import PolicySet, policy_by_name
from loadgen.simulator.results import SimResult
from loadgen.simulator.scenario import Scenario
from loadgen.traces import TraceRequest

__all__ = ["SimRunner", "run_policies"]


def run_policies(
    scenario: Scenario,
    trace: Sequence[TraceRequest],
    policies: Sequence[str],
    *,
    show_progress: bool = True,
    record_token_times: bool = False,
) -> list[SimResult]:
    """Simulate each named policy set in turn and return the results in the same order.

    Raises:
        KeyError: for an unknown policy name (before anything runs).
    """
    chosen = [policy_by_name(name) for name in policies]
    results: list[SimResult] = []
    console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}%"),
        TimeElapsedColumn(),
        console=console,
        disable=not show_progress,
        transient=False,
    ) as bar:
        for policy in chosen:
            task = bar.add_task(f"simulating {policy.name}", total=1.0)

            def progress(share: float, task_id: TaskID = task) -> None:
                bar.update(task_id, completed=share)

            results.append(
                simulate(
                    scenario,
                    policy,
                    trace,
                    record_token_times=record_token_times,
                    progress=progress,
                )
            )
            bar.update(task, completed=1.0)
    return results


class SimRunner:
    """Runs policy sets one after another on one scenario and window, each with a progress
    line on stderr, and adds up their wall time."""

    def __init__(
        self, scenario: Scenario, *, measure_from_s: float = 0.0, show_progress: bool = True
    ) -> None:
        """Bind the scenario and the measured window's start."""
        self.scenario = scenario
        self.measure_from_s = measure_from_s
        self.console = Console(stderr=True)
        self.show_progress = show_progress
        self.wall_s = 0.0

    def run(self, policy: PolicySet, trace: Sequence[TraceRequest]) -> SimResult:
        """Simulate ``policy`` on ``trace``; its label names the static size if it has one."""
        label = policy.name
        if policy.instances is not None:
            label += f" x{policy.instances}"
        if policy.regions:
            label += f" in {','.join(policy.regions)}"
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>5.1f}%"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not self.show_progress,
            transient=False,
        ) as bar:
            task = bar.add_task(f"simulating {label} ({len(trace)} requests)", total=1.0)
            result = simulate(
                self.scenario,
                policy,
                trace,
                progress=lambda share: bar.update(task, completed=share),
                measure_from_s=self.measure_from_s,
            )
            bar.update(task, completed=1.0)
        self.wall_s += result.wall_s
        return result
