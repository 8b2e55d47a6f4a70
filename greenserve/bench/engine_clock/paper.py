"""The measured clock responses the engine is compared with (transcribed from the seeds).

DynamoLLM (``../shared/seeds/001_dynamollm.md`` §3.2–3.4, Tables I–III): GPU energy in Wh of
Llama2-70B (and other models) on a DGX H100 under vLLM, per request class × TP × SM clock
(0.8/1.2/1.6/2.0 GHz), 30-s runs at a given load in tokens per second; ``None`` marks a cell
that violates the SLO. throttLL'eM (``002_throttllem.md`` §4, Fig. 2): Llama2-13B TP2 on
A100, batch up to 32, 1 input and 1,024 output tokens per request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "CLASSES",
    "PAPER_CLOCKS_MHZ",
    "TABLE_I",
    "TABLE_II",
    "TABLE_III",
    "THROTTLLEM",
    "Cells",
    "ThrottllemPoint",
]

PAPER_CLOCKS_MHZ: Final = (800.0, 1200.0, 1600.0, 1980.0)
"""The paper's columns ("0.8/1.2/1.6/2.0 GHz"; 2.0 is the H100 maximum, 1,980 MHz)."""

CLASSES: Final = ("SS", "SM", "SL", "MS", "MM", "ML", "LS", "LM", "LL")
"""DynamoLLM Table IV classes: input S < 256 ≤ M < 1,024 ≤ L ≤ 8,192; output S < 100 ≤ M < 350
≤ L."""

Cells = dict[int, tuple[float | None, ...]]
"""Energy (Wh) by TP, one value per clock of :data:`PAPER_CLOCKS_MHZ`."""

_: Final[None] = None
TABLE_I: Final[dict[str, Cells]] = {
    "SS": {2: (_, 0.77, 0.97, 1.03), 4: (0.94, 0.79, 0.91, 1.01), 8: (1.35, 1.19, 1.29, 1.49)},
    "SM": {2: (_, 2.78, 3.45, 3.68), 4: (3.39, 2.82, 3.37, 3.81), 8: (4.55, 4.15, 4.43, 4.74)},
    "SL": {2: (_, _, _, _), 4: (4.84, 4.17, 4.97, 5.52), 8: (6.37, 5.62, 5.59, 6.95)},
    "MS": {2: (_, _, 1.02, 1.09), 4: (_, 1.08, 1.07, 1.20), 8: (1.51, 1.29, 1.34, 1.73)},
    "MM": {2: (_, _, _, _), 4: (_, 4.23, 3.91, 4.08), 8: (5.34, 4.39, 4.56, 5.44)},
    "ML": {2: (_, _, _, _), 4: (_, 4.99, 4.66, 4.53), 8: (6.86, 5.79, 6.52, 7.12)},
    "LS": {2: (_, _, _, _), 4: (_, 1.51, 1.64, 1.76), 8: (2.55, 2.53, 2.83, 2.94)},
    "LM": {2: (_, _, _, _), 4: (_, _, _, _), 8: (_, 7.71, 8.81, 9.17)},
    "LL": {2: (_, _, _, _), 4: (_, _, _, _), 8: (_, 12.99, 11.89, 13.21)},
}
"""Table I: Llama2-70B by class at medium load (2,000 TPS)."""

TABLE_II: Final[dict[float, Cells]] = {
    650.0: {2: (_, _, 3.41, 3.75), 4: (3.44, 2.93, 3.71, 3.73), 8: (4.49, 3.76, 4.52, 4.64)},
    2000.0: {2: (_, _, _, _), 4: (_, 4.23, 3.91, 4.08), 8: (5.34, 4.39, 4.56, 5.44)},
    4000.0: {2: (_, _, _, _), 4: (_, _, 4.22, 4.13), 8: (5.86, 5.24, 5.42, 6.62)},
}
"""Table II: Llama2-70B MM requests by load (TPS)."""

TABLE_III: Final[dict[str, Cells]] = {
    "llama-2-13b": {
        2: (1.05, 0.99, 1.14, 1.24), 4: (1.52, 1.27, 1.58, 1.65), 8: (2.61, 2.35, 2.74, 3.45)
    },
    "llama-2-70b": {2: (_, _, _, _), 4: (_, 4.23, 3.91, 4.08), 8: (5.34, 4.39, 4.56, 5.44)},
    "llama-3-70b": {2: (_, _, _, _), 4: (_, 4.32, 4.28, 4.57), 8: (6.11, 5.18, 5.42, 6.45)},
}  # fmt: skip
"""Table III: MM requests at 2,000 TPS, the models the engine knows (Mixtral-8x7B/8x22B and
Falcon-180B are not dense Llama-layout models and are left out)."""


@dataclass(frozen=True, slots=True)
class ThrottllemPoint:
    """throttLL'eM §4's characterisation engine and what it measured."""

    gpu: str = "A100-80GB"
    model: str = "llama-2-13b"
    tp: int = 2
    batch: int = 32
    prompt_tokens: int = 1
    output_tokens: int = 1024
    max_clock_mhz: float = 1410.0
    sweet_spot_mhz: float = 1050.0
    tokens_per_joule_gain_pct_at_1050: float = 37.4
    tbt_increase_pct_at_1050: float = 5.41
    worse_below_mhz: float = 840.0


THROTTLLEM: Final = ThrottllemPoint()
"""throttLL'eM §4: the efficiency sweet spot and the max-batch point at 1,050 MHz."""
