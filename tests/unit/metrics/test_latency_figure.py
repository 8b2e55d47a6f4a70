"""The latency figure: one per run, TTFT/TBT/E2E side by side, a line per class, SLOs marked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from shared.metrics.headless import plt
from shared.metrics.plots import latency_figures, plot_latency_cdfs
from shared.metrics.records import RecordColumns, RequestRecord, to_columns
from shared.metrics.summary import ClassSlo

SLOS = {"SS": ClassSlo(ttft_s=0.25, tbt_s=0.1), "LL": ClassSlo(ttft_s=2.0, tbt_s=0.1)}


def _run(scale: float, n: int = 40) -> RecordColumns:
    rng = np.random.default_rng(int(scale * 100))
    records = []
    for i in range(n):
        name = "SS" if i % 2 else "LL"
        ttft = float(rng.uniform(0.05, 0.5)) * scale
        tokens = 20 if name == "SS" else 400
        finish = ttft + (tokens - 1) * float(rng.uniform(0.02, 0.05)) * scale
        records.append(
            RequestRecord(
                request_id=str(i),
                request_class=name,
                arrival_s=float(i),
                latency_budget_s=finish,
                first_token_s=i + ttft,
                finish_s=i + finish,
                output_tokens=tokens,
            )
        )
    return to_columns(records)


def _xs(line: Line2D) -> list[float]:
    return [float(x) for x in np.asarray(line.get_xdata(), dtype=float)]


def _vertical_lines(ax: Axes) -> set[float]:
    xs = [_xs(line) for line in ax.lines]
    return {x[0] for x in xs if len(x) == 2 and x[0] == x[1]}


def test_each_run_gets_one_figure_with_labelled_shared_axes_and_its_slos_marked() -> None:
    """Test that every run's figure has the three panels on one y axis, a CDF per class in
    each, labelled axes, the SLO lines of the classes' targets (E2E: 1, its own window),
    plain tick labels, and the same x limits as the other run's figure."""
    figures = latency_figures([("fast", _run(1.0)), ("slow", _run(3.0))], SLOS)
    try:
        assert [label for label, _ in figures] == ["fast", "slow"]
        limits = []
        for _, fig in figures:
            fig.canvas.draw()
            axes = fig.axes
            assert [ax.get_title() for ax in axes] == ["TTFT", "TBT", "E2E"]
            assert all(ax.get_xlabel() for ax in axes)
            assert axes[0].get_ylabel() == "fraction of requests at or below"
            assert axes[0].get_shared_y_axes().joined(axes[0], axes[2])
            curves = [[ln for ln in ax.lines if len(set(_xs(ln))) > 1] for ax in axes]
            assert [len(c) for c in curves] == [2, 2, 2]  # SS and LL in every panel
            assert all(np.max(np.asarray(ln.get_ydata())) == 1.0 for c in curves for ln in c)
            assert _vertical_lines(axes[0]) == {0.25, 2.0}
            assert _vertical_lines(axes[1]) == {0.1}
            assert _vertical_lines(axes[2]) == {1.0}
            for ax in axes:
                labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
                assert labels
                assert not any(c in "".join(labels) for c in "e×^$"), labels
            legend = fig.legends[0]
            assert [t.get_text() for t in legend.get_texts()] == ["LL (n=20)", "SS (n=20)"]
            limits.append([ax.get_xlim() for ax in axes])
        assert limits[0] == limits[1]
    finally:
        for _, fig in figures:
            plt.close(fig)


def test_one_file_per_run(tmp_path: Path) -> None:
    """Test that one run is written to the path given, several each beside it by label."""
    [one] = plot_latency_cdfs([("replay", _run(1.0))], tmp_path / "latency_cdf.png", SLOS)
    assert one == tmp_path / "latency_cdf.png"
    both = plot_latency_cdfs(
        [("a b", _run(1.0)), ("c", _run(2.0))], tmp_path / "many" / "latency_cdf.png", SLOS
    )
    assert [p.name for p in both] == ["latency_cdf_a_b.png", "latency_cdf_c.png"]
    assert all(p.stat().st_size > 10_000 for p in [one, *both])
