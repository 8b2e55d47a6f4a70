"""Run several policy sets over one trace, with a progress bar on stderr."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from loadgen.simulator.cluster import simulate
from loadgen.simulator.policies import policy_by_name
from loadgen.simulator.results import SimResult
from loadgen.simulator.scenario import Scenario
from loadgen.traces import TraceRequest

__all__ = ["run_policies"]


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
