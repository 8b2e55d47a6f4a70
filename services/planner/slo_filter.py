"""SLO filters of FREESH Eq. 1e: which configurations may receive workers at all.

Eq. 1e, x_i·SLO_i ≤ 1(x_i > 0)·SLŌ_r, is linear in practice: a configuration that misses its
class's limit is forced to zero workers (seed 000 §1.4). The repository applies three limits:
E2E ≤ 5 × mean E2E over the modes of the same (partition, class), TBT ≤ 150 ms, and TTFT ≤ 300 ms
(short input) or 600 ms (long input). With a clock dimension (DynamoLLM Eq. 1) the mean runs
over every (mode, clock) row of the class.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from statistics import fmean
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from services.planner.problem import ServingConfig, SloPolicy

__all__ = ["UNMEASURED", "SloVerdict", "e2e_limits", "eligible_configs", "slo_verdict"]

UNMEASURED = 1e9
"""A latency no run measured (no request finished), as live profiles carry it: never a
configuration's limit-passing value, and never part of its class's mean."""


@dataclass(frozen=True, slots=True)
class SloVerdict:
    """Whether a configuration passes, and which limits it breaks."""

    config: ServingConfig
    violations: tuple[str, ...]

    @property
    def eligible(self) -> bool:
        """True when no limit is broken."""
        return not self.violations


def e2e_limits(configs: Iterable[ServingConfig], policy: SloPolicy) -> dict[tuple[str, str], float]:
    """E2E limit per (partition, class): the tighter of the relative and absolute limits."""
    by_class: dict[tuple[str, str], list[float]] = defaultdict(list)
    for config in configs:
        by_class[(config.partition, config.request_class)].append(config.e2e_s)
    limits: dict[tuple[str, str], float] = {}
    for key, values in by_class.items():
        limit = float("inf")
        # The mean runs over the modes that were measured: one unmeasured row's sentinel
        # would lift the relative limit above every real value, and the filter would pass
        # the class's slowest modes.
        measured = [v for v in values if v < UNMEASURED]
        if policy.e2e_mean_scale is not None and measured:
            limit = policy.e2e_mean_scale * fmean(measured)
        absolute = policy.e2e_s_by_class.get(key[1])
        if absolute is not None:
            limit = min(limit, absolute)
        limits[key] = limit
    return limits


def slo_verdict(
    config: ServingConfig, policy: SloPolicy, e2e_limit_s: float = float("inf")
) -> SloVerdict:
    """Check one configuration against the policy's TBT and TTFT limits and an E2E limit."""
    violations: list[str] = []
    if config.e2e_s >= UNMEASURED:
        violations.append("e2e never measured")
    elif config.e2e_s > e2e_limit_s:
        violations.append(f"e2e {config.e2e_s:.3g} s > {e2e_limit_s:.3g} s")
    if policy.tbt_ms is not None and config.tbt_ms > policy.tbt_ms:
        violations.append(f"tbt {config.tbt_ms:.4g} ms > {policy.tbt_ms:.4g} ms")
    ttft_limit = policy.ttft_ms_by_class.get(config.request_class, policy.default_ttft_ms)
    if ttft_limit is not None and config.ttft_ms > ttft_limit:
        violations.append(f"ttft {config.ttft_ms:.4g} ms > {ttft_limit:.4g} ms")
    return SloVerdict(config=config, violations=tuple(violations))


def eligible_configs(
    configs: Iterable[ServingConfig], policy: SloPolicy
) -> tuple[tuple[ServingConfig, ...], tuple[SloVerdict, ...]]:
    """Split configurations into those that pass every limit and the verdicts of those that fail.

    Rows with zero capacity stay eligible: FREESH's negative-λ fill (Table 3) places them.
    """
    configs = tuple(configs)
    limits = e2e_limits(configs, policy)
    passed: list[ServingConfig] = []
    failed: list[SloVerdict] = []
    for config in configs:
        verdict = slo_verdict(config, policy, limits[(config.partition, config.request_class)])
        if verdict.eligible:
            passed.append(config)
        else:
            failed.append(verdict)
    return tuple(passed), tuple(failed)
