"""PNG plots of a live replay: latency CDFs per class and power per worker over time."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from loadgen.replay import ReplayResult
from loadgen.report import replay_records
from shared.metrics.plots import plot_latency_cdfs
from shared.metrics.records import to_columns
from shared.metrics.summary import ClassSlo

__all__ = ["plot_replay"]


def _slos() -> dict[str, ClassSlo]:
    """The TTFT/TBT targets of the classes the stack's default classifier scheme assigns."""
    from shared.config import ClassifierSettings
    from shared.domain.classes import default_slos, scheme_by_name

    scheme = scheme_by_name(ClassifierSettings().scheme)
    return {
        name: ClassSlo(ttft_s=slo.ttft_ms / 1000.0, tbt_s=slo.tbt_ms / 1000.0)
        for name, slo in default_slos(scheme).items()
    }


def plot_replay(result: ReplayResult, out_dir: Path, label: str = "replay") -> list[Path]:
    """Write ``latency_cdf.png`` and ``power.png`` under ``out_dir``; return the paths.

    Power is the slope of each worker's energy counter between heartbeats, in model time
    (the counter is the simulated GPU's, like NVML's), so the plot shows what the GPUs drew.
    """
    from shared.metrics.headless import plt

    paths = plot_latency_cdfs(
        [(label, to_columns(replay_records(result)))], out_dir / "latency_cdf.png", _slos()
    )
    fig, ax = plt.subplots(figsize=(10, 4))
    k, t0 = result.speedup, result.started_at
    for worker_id, worker in sorted(result.workers.items()):
        samples = sorted(worker.samples)
        if len(samples) < 2:
            continue
        minutes, watts = [], []
        for (ta, ea), (tb, eb) in itertools.pairwise(samples):
            if tb > ta:
                minutes.append((tb - t0) * k / 60.0)
                watts.append((eb - ea) / ((tb - ta) * k))
        ax.plot(np.asarray(minutes), np.asarray(watts), label=f"{worker_id} ({worker.region})")
    ax.set_xlabel("model time (min)")
    ax.set_ylabel("power (W)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    path = out_dir / "power.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    paths.append(path)
    return paths
