"""ScaleShard's node layouts: Table VI re-shard delays, load curves, the lowest-power layout.

The pure part of DynamoLLM's ScaleShard baseline (:mod:`loadgen.simulator.scaleshard` runs
it in the simulator): what a node's layout (``TP8``, ``2TP4``, ``4TP2``) costs to switch
to (DynamoLLM Table VI in units of τ), what power a layout draws at a load (the §3.1
profile as a piecewise-linear :class:`LoadCurve`), and which layout of a pool's nodes
covers ``α × L`` at the least power (Eq. 1 at the pool level, clock fixed at maximum).
"""

from __future__ import annotations

import csv
import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from loadgen.simulator.gate import instance_idle_w
from services.planner.live_profiles import ProfileRequest, class_pools, measure_mode_profiles
from services.planner.problem import ServingConfig
from shared.domain.classes import scheme_by_name
from shared.engine import EngineConfig
from shared.engine.coefficients import load_coefficients
from shared.engine.hardware import gpu_spec, model_shape
from shared.engine.profile_sim import SimulatedProfileBackend, SimWindow
from shared.engine.profiler import ProfileTarget, RequestClass
from shared.paths import data_path

__all__ = [
    "NODE_GPUS",
    "TABLE_VI_TAU",
    "LoadCurve",
    "NodeOption",
    "ProfileSource",
    "choose_layout",
    "layout_power_w",
    "measured_curve",
    "reshard_delay_s",
    "tau_s",
]

NODE_GPUS: Final = 8
"""GPUs of one node (DGX): the unit DynamoLLM re-shards over (Table VI)."""

TABLE_VI_TAU: Final[dict[tuple[int, int], int]] = {
    (8, 4): 1,
    (8, 2): 1,
    (4, 8): 0,
    (4, 2): 1,
    (2, 8): 0,
    (2, 4): 0,
}
"""DynamoLLM Table VI, re-shard cost on 8 GPUs in units of τ, for the homogeneous layouts
(source TP, destination TP): TP8, 2TP4 (``4``) and 4TP2 (``2``). Going to a larger TP only
drops weights every GPU already holds (0); going to a smaller one receives the missing
1/8 chunks over NVLink in parallel (τ)."""


def tau_s(model: str, gpu: str) -> float:
    """DynamoLLM's τ: time to move 1/8 of the model's weights between two GPUs of a node.

    The GPU-to-GPU rate is the calibrated engine's fitted all-reduce bandwidth of TP2 on that
    GPU (``shared/engine/coefficients_v1.json``, NCCL over NVLink); the seed's τ ≈ 50 ms is
    the same quantity for Llama2-70B at 300 GB/s.
    """
    rate = load_coefficients().gpus[gpu].allreduce_bytes_per_s["2"]
    return model_shape(model).weight_bytes / NODE_GPUS / rate


def reshard_delay_s(source_tp: int, target_tp: int, tau: float, sync_s: float) -> float:
    """Time a node serves nothing while it changes layout: Table VI × τ + engine sync."""
    if source_tp == target_tp:
        return 0.0
    return TABLE_VI_TAU[(source_tp, target_tp)] * tau + sync_s


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadCurve:
    """Power of one instance against the arrival rate of one class (DynamoLLM §3.1 profile).

    Points are measured at a few loads up to ``max_qps`` and interpolated piecewise
    linearly (DynamoLLM uses SciPy ``interp1d``); the first point is the idle instance.
    """

    max_qps: float
    """L̄: the highest arrival rate one instance sustains within the class's SLO."""
    qps: tuple[float, ...]
    """Ascending loads, starting at 0 and ending at ``max_qps``."""
    power_w: tuple[float, ...]

    def at(self, qps: float) -> float:
        """Interpolated power at ``qps`` (held at ``max_qps`` beyond it)."""
        return float(np.interp(min(qps, self.max_qps), self.qps, self.power_w))


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeOption:
    """One layout of one node for one class: ``instances`` instances of TP ``tp``."""

    tp: int
    instances: int
    curve: LoadCurve

    @property
    def capacity_qps(self) -> float:
        """instances × L̄."""
        return self.instances * self.curve.max_qps

    @property
    def idle_w(self) -> float:
        """The node's power when idle (the same for every layout of the node)."""
        return self.instances * self.curve.power_w[0]

    def power_at(self, utilisation: float) -> float:
        """The node's power when each instance carries ``utilisation`` × its L̄."""
        return self.instances * self.curve.at(utilisation * self.curve.max_qps)


def layout_power_w(options: Sequence[NodeOption], demand_qps: float) -> float:
    """Predicted power of nodes at ``demand_qps``, split in proportion to their capacity."""
    capacity = sum(o.capacity_qps for o in options)
    utilisation = min(1.0, demand_qps / capacity) if capacity > 0 else 1.0
    return sum(o.power_at(utilisation) for o in options)


def choose_layout(
    choices: Sequence[Mapping[int, NodeOption]],
    current: Sequence[int],
    demand_qps: float,
    alpha: float,
) -> tuple[int, ...]:
    """TP per node: the lowest predicted power whose capacity covers ``alpha × demand_qps``.

    When no layout covers it, the one with the largest capacity. Ties go to the layout that
    changes the fewest nodes. Nodes with the same options are interchangeable, so layouts are
    enumerated as counts per group (a few hundred candidates for a dozen nodes), and each
    group's counts go first to the nodes that already have that TP.
    """
    groups: dict[tuple[tuple[int, NodeOption], ...], list[int]] = {}
    for index, options in enumerate(choices):
        groups.setdefault(tuple(sorted(options.items())), []).append(index)
    per_group = [
        list(itertools.combinations_with_replacement(sorted(dict(key)), len(nodes)))
        for key, nodes in groups.items()
    ]
    need = alpha * demand_qps
    best: tuple[tuple[float, ...], tuple[int, ...]] | None = None
    for combo in itertools.product(*per_group):
        tps = [0] * len(choices)
        for nodes, counts in zip(groups.values(), combo, strict=True):
            for node, tp in zip(nodes, _assign(counts, [current[n] for n in nodes]), strict=True):
                tps[node] = tp
        picked = [choices[n][tp] for n, tp in enumerate(tps)]
        capacity = sum(o.capacity_qps for o in picked)
        power = layout_power_w(picked, demand_qps)
        changes = float(sum(1 for a, b in zip(tps, current, strict=True) if a != b))
        score = (0.0, power, changes) if capacity >= need else (1.0, -capacity, power, changes)
        if best is None or score < best[0]:
            best = (score, tuple(tps))
    assert best is not None
    return best[1]


def _assign(counts: Sequence[int], current: Sequence[int]) -> list[int]:
    """Give a group's target TPs to its nodes, keeping each node's TP where the counts allow."""
    left = list(counts)
    out = [0] * len(current)
    for i, tp in enumerate(current):
        if tp in left:
            left.remove(tp)
            out[i] = tp
    for i in range(len(current)):
        if out[i] == 0:
            out[i] = left.pop(0)
    return out


@functools.lru_cache(maxsize=32)
def _profile_rows(request: ProfileRequest) -> tuple[ServingConfig, ...]:
    return measure_mode_profiles(request)


ProfileSource = Callable[[str, int, str], LoadCurve | None]
"""``(gpu, tp, class) → load curve`` (``None``: no profile); tests inject their own."""


@functools.lru_cache(maxsize=1)
def _conv_classes(scheme: str) -> dict[str, RequestClass]:
    """Request lengths per class from the Azure conversation trace (as the live profiler)."""
    trace = data_path("traces", "AzureLLMInferenceTrace_conv.csv")
    with trace.open(newline="") as handle:
        lengths = [
            (int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in csv.DictReader(handle)
        ]
    return {c.name: c for c in class_pools(scheme_by_name(scheme), lengths)}


@functools.lru_cache(maxsize=128)
def measured_curve(
    request: ProfileRequest, request_class: str, fractions: tuple[float, ...]
) -> LoadCurve | None:
    """The calibrated engine's load curve of one class on one mode at maximum clock.

    ``L̄`` and the power at ``L̄`` are the live planner's profile row
    (:func:`~services.planner.live_profiles.measure_mode_profiles`); the other points are
    the same measurement (:class:`~shared.engine.profile_sim.SimulatedProfileBackend`, same
    window, request lengths and engine settings) at ``fractions`` of ``L̄``; idle is the
    engine's idle power. ``None`` when no load meets the class's SLO (``L̄ = 0``).
    """
    row = next(
        (r for r in _profile_rows(request) if r.request_class == request_class and r.max_qps > 0),
        None,
    )
    if row is None:
        return None
    gpu = gpu_spec(request.gpu)
    idle = instance_idle_w(
        EngineConfig(gpu=gpu.name, model=request.model, tp=request.tp,
                     max_num_seqs=request.max_num_seqs)
    )  # fmt: skip
    backend = SimulatedProfileBackend(
        window=SimWindow(window_s=request.window_s, drain_s=2.0 * request.window_s),
        max_num_seqs=request.max_num_seqs,
    )
    target = ProfileTarget(
        gpu_type=gpu.name.split("-")[0], tp=request.tp, model=request.model,
        clock_mhz=gpu.max_clock_mhz,
    )  # fmt: skip
    cls = _conv_classes(request.scheme)[request_class]
    loads = sorted(f * row.max_qps for f in fractions if 0.0 < f < 1.0)
    powers = [backend.measure(target, cls, q).power_w for q in loads]
    return LoadCurve(
        max_qps=row.max_qps,
        qps=(0.0, *loads, row.max_qps),
        power_w=(idle, *powers, row.power_w),
    )
