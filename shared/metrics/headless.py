"""matplotlib's pyplot on the headless Agg backend: the one place that chooses the backend.

Plotting functions import ``plt`` from here inside their bodies, so commands that draw
nothing never import matplotlib, and no plot needs a display.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # after the backend is chosen

__all__ = ["plt"]
