"""The policy sets the CLI offers, by name (light: the CLI's parser imports it).

The papers' baselines, the product's default (the live planner settings,
:func:`loadgen.simulator.policies.policy_from_settings`) and its one-lever ablations. The
exploratory sets that led to the default stay in :data:`loadgen.simulator.policies.POLICY_SETS`
for the tests and docs that measure them, but the CLI does not offer them.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ABLATION_LEVERS", "BASELINE_SETS", "CLI_POLICY_NAMES", "DEFAULT_SET"]

DEFAULT_SET: Final = "default"
"""The product's default policy: what ``greenserve bench cluster`` reports as its headline."""

ABLATION_LEVERS: Final = (
    "no-scale-down",
    "max-clock",
    "tp8-only",
    "no-shift",
    "fcfs",
    "bfio",
    "no-guards",
    "oracle-lengths",
)
"""Each names one lever switched off from the default (``default-<lever>``)."""

BASELINE_SETS: Final = (
    "single-pool",
    "multi-pool",
    "max-clock-fcfs-rr",
    "scale-freq",
    "scale-freq-profile",
    "scale-inst",
    "scale-shard",
)
"""The papers' baselines (DynamoLLM's SinglePool, MultiPool, ScaleFreq, ScaleInst,
ScaleShard) and every GPU at the maximum clock."""

CLI_POLICY_NAMES: Final = (
    DEFAULT_SET,
    *(f"{DEFAULT_SET}-{lever}" for lever in ABLATION_LEVERS),
    *BASELINE_SETS,
)
"""What ``greenserve simulate --policy`` and ``bench cluster --policy/--option`` accept."""
