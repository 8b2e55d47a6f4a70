"""Log axes in saved figures carry plain tick labels, not matplotlib's "4 × 10⁰"."""

from __future__ import annotations

from pathlib import Path

from shared.metrics.headless import plt
from shared.metrics.plots import save_figure


def test_log_axis_under_a_decade_has_plain_labels(tmp_path: Path) -> None:
    fig, ax = plt.subplots()
    ax.plot([2000, 2250], [4.1, 4.6])
    ax.plot([2000, 2250], [2.05, 2.3])
    ax.set_yscale("log")
    save_figure(fig, tmp_path / "p.png")
    labels = [t.get_text() for t in ax.get_yticklabels(minor=True) if t.get_text()]
    assert labels, "a log axis over 2-5 ms should label its minor ticks"
    assert all("times" not in label for label in labels), labels
    assert {"2", "3", "4"} <= set(labels)
    assert (tmp_path / "p.png").stat().st_size > 0
