"""Whether a commanded clock is one the instance's GPU supports.

A clock command outside the GPU's supported range is refused with its reason (the
``ClockReply`` says ``accepted=False``) and counted, never snapped to the nearest end: a
command for 50 MHz or 5,000 MHz comes from a bug or from someone who should not be
setting clocks, and running the GPU at its minimum or maximum instead would hide both
while changing the fleet's latency or power. A clock inside the range is snapped to the
nearest supported step, as NVML does.
"""

from __future__ import annotations

import math
from typing import Final

from shared.engine.hardware import gpu_spec

__all__ = ["CLOCK_OUT_OF_RANGE", "out_of_range"]

CLOCK_OUT_OF_RANGE: Final = "clock_out_of_range"
"""Error counter code of a refused clock command."""


def out_of_range(gpu: str, mhz: float) -> str | None:
    """Why ``mhz`` cannot be set on ``gpu``, or None when it can (or the GPU type is not
    one the engine model knows: its clock endpoint must judge).
    """
    try:
        spec = gpu_spec(gpu)
    except ValueError:
        return None
    if not math.isfinite(mhz) or not spec.min_clock_mhz <= mhz <= spec.max_clock_mhz:
        return (
            f"{mhz:g} MHz is outside {gpu}'s supported "
            f"{spec.min_clock_mhz:g}-{spec.max_clock_mhz:g} MHz"
        )
    return None
