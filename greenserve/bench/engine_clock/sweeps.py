"""How ``bench engine-clock`` measures the simulated engine the way the papers measured GPUs.

DynamoLLM's protocol (``001_dynamollm.md`` §3.1–3.2): one vLLM instance of TP n receives a
request class at a fixed load in tokens per second (prompt + output) for 30 s; the GPU energy
of the run is reported, and a cell violates the SLO when the p99 TTFT or TBT exceeds the
class's Table IV limit. The engine replays the same: Poisson arrivals of the class for 30 s of
engine time, lengths drawn from the Azure conversation trace within the class box, energy of
the instance's GPUs from the first arrival until the last request finishes, mean of several
seeds (the paper repeats each run 5 times).

throttLL'eM's characterisation (``002_throttllem.md`` §4) is a saturated engine: a full batch
decoding, so tokens per joule = batch / (iteration time × power of all GPUs).
"""

from __future__ import annotations

import csv
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from greenserve.bench.engine_clock.paper import THROTTLLEM
from shared.domain.classes import DYNAMOLLM_TBT_MS, DYNAMOLLM_TTFT_MS
from shared.engine.api import EngineConfig, EngineRequest
from shared.engine.clock import DEFAULT_CLOCK_SETTINGS, ClockSettings
from shared.engine.coefficients import Coefficients, for_stack, load_coefficients
from shared.engine.simulated import create_engine

__all__ = [
    "DYNAMOLLM_STACK",
    "CellResult",
    "ClassPools",
    "class_pools",
    "run_cell",
    "saturated_tokens_per_joule",
    "stack_coefficients",
    "throttllem_sweep",
]

DYNAMOLLM_STACK = "splitwise"
"""The serving-stack overheads DynamoLLM's tables are replayed with. DynamoLLM ran vLLM
before v0.6 (arXiv v1 2408.00741, August 2024; v0.6.0 came out in September 2024), whose
CPU side left the GPU waiting for a large share of each decode step: the vLLM team's
profile of v0.5.3 (blog "vLLM v0.6.0: 2.7x Throughput Improvement", 2024-09-05) had the
API server and scheduler take 62 % of Llama-3-8B's time on one H100, and v0.6.0 halved
Llama-70B's time per output token on 4×H100. Of the engine's fitted stacks, ``splitwise``
(host overheads fitted on Splitwise's Llama-2-70B DGX-H100 token times, the same group and
period) is that era's; ``vllm`` (ML.ENERGY, vLLM v1) is today's."""

_INPUT_EDGES = (1, 256, 1024, 8193)
_OUTPUT_EDGES = (1, 100, 350, 1 << 30)
_LETTERS = "SML"

ClassPools = dict[str, tuple[tuple[int, ...], tuple[int, ...]]]
"""Prompt and output length pools per DynamoLLM class."""


def class_pools(trace_csv: Path) -> ClassPools:
    """Return each Table IV class's prompt and output lengths from an Azure-format trace.

    Lengths are the trace's marginals within the class box, drawn independently (the same
    assumption as the profiler's, ``docs/engine.md``).
    """
    with trace_csv.open(newline="") as handle:
        rows = [(int(r["ContextTokens"]), int(r["GeneratedTokens"]))
                for r in csv.DictReader(handle)]  # fmt: skip
    pools: ClassPools = {}
    for i, letter_in in enumerate(_LETTERS):
        low_in, high_in = _INPUT_EDGES[i], _INPUT_EDGES[i + 1]
        prompts = tuple(p for p, _ in rows if low_in <= p < high_in)
        for j, letter_out in enumerate(_LETTERS):
            low_out, high_out = _OUTPUT_EDGES[j], _OUTPUT_EDGES[j + 1]
            outputs = tuple(o for _, o in rows if low_out <= o < high_out)
            if prompts and outputs:
                pools[letter_in + letter_out] = (prompts, outputs)
    return pools


def stack_coefficients(stack: str, coefficients: Coefficients | None = None) -> Coefficients:
    """Return ``coefficients`` (the packaged ones by default) with every GPU's host
    overheads replaced by those of serving ``stack`` (see :data:`DYNAMOLLM_STACK`)."""
    base = coefficients or load_coefficients()
    gpus = {gpu: for_stack(base, gpu, stack) for gpu in base.gpus}
    return Coefficients(version=base.version, gpus=gpus, stacks=base.stacks,
                        provenance=base.provenance)  # fmt: skip


@dataclass(frozen=True, slots=True)
class CellResult:
    """One (class, TP, clock, load) cell, averaged over seeds."""

    energy_wh: float
    ttft_p99_s: float
    tbt_p99_s: float
    feasible: bool
    """Every seed met the class's TTFT and TBT limits at p99 and finished every request."""


def _p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0


def _one_run(
    pools: ClassPools,
    name: str,
    *,
    model: str,
    tp: int,
    clock_mhz: float,
    tps: float,
    seed: int,
    window_s: float,
    clock: ClockSettings,
    coefficients: Coefficients | None,
) -> tuple[float, float, float, bool]:
    prompts, outputs = pools[name]
    engine = create_engine(
        EngineConfig(gpu="H100-80GB", model=model, tp=tp, clock_mhz=clock_mhz),
        coefficients=coefficients,
        clock_settings=clock,
    )
    rng = random.Random(f"{name}/{seed}")
    qps = tps / (statistics.fmean(prompts) + statistics.fmean(outputs))
    arrivals: list[tuple[float, int, int]] = []
    t = rng.expovariate(qps)
    while t < window_s:
        arrivals.append((t, rng.choice(prompts), rng.choice(outputs)))
        t += rng.expovariate(qps)
    capacity = engine.kv_blocks_total * engine.config.block_size
    first: dict[int, float] = {}
    finish: dict[int, float] = {}
    index = 0
    # A run that cannot keep up is cut off: its SLO is certainly broken by then.
    give_up_s = window_s + 300.0
    while len(finish) < len(arrivals) and engine.now_s < give_up_s:
        until = arrivals[index][0] if index < len(arrivals) else give_up_s
        while engine.now_s < until and (run := engine.step_many(1 << 30, until)) is not None:
            if run.prefill_tokens:
                for rid in run.emitted[run.decode_tokens :]:
                    first.setdefault(int(rid), engine.now_s)
            for rid in run.finished:
                finish[int(rid)] = engine.now_s
        if index < len(arrivals):
            engine.idle_until(until)
            arrival, prompt, output = arrivals[index]
            engine.add(
                EngineRequest(
                    request_id=str(index),
                    prompt_tokens=max(1, min(prompt, capacity - output)),
                    output_tokens=output,
                    arrival_s=arrival,
                )
            )
            index += 1
    ttft = [first.get(k, engine.now_s) - a for k, (a, _, _) in enumerate(arrivals)]
    tbt = [
        (finish[k] - first[k]) / (o - 1)
        for k, (_, _, o) in enumerate(arrivals)
        if o > 1 and k in finish
    ]
    ttft_limit_s = DYNAMOLLM_TTFT_MS[_LETTERS.index(name[0])] / 1000.0
    feasible = (
        len(finish) == len(arrivals)
        and _p99(ttft) <= ttft_limit_s
        and _p99(tbt) <= DYNAMOLLM_TBT_MS / 1000.0
    )
    return engine.energy_j / 3600.0, _p99(ttft), _p99(tbt), feasible


def run_cell(
    pools: ClassPools,
    name: str,
    *,
    model: str,
    tp: int,
    clock_mhz: float,
    tps: float,
    seeds: int = 5,
    window_s: float = 30.0,
    clock: ClockSettings = DEFAULT_CLOCK_SETTINGS,
    coefficients: Coefficients | None = None,
) -> CellResult | None:
    """Replay class ``name`` at ``tps`` on one H100 instance; ``None`` when the model does not
    fit at that TP (the paper's TP2 cells of large models are empty for the same reason)."""
    try:
        runs = [
            _one_run(pools, name, model=model, tp=tp, clock_mhz=clock_mhz, tps=tps,
                     seed=seed, window_s=window_s, clock=clock, coefficients=coefficients)
            for seed in range(seeds)
        ]  # fmt: skip
    except ValueError:
        return None
    return CellResult(
        energy_wh=statistics.fmean(r[0] for r in runs),
        ttft_p99_s=max(r[1] for r in runs),
        tbt_p99_s=max(r[2] for r in runs),
        feasible=all(r[3] for r in runs),
    )


def saturated_tokens_per_joule(
    *,
    gpu: str,
    model: str,
    tp: int,
    batch: int,
    context_tokens: float,
    clock: ClockSettings = DEFAULT_CLOCK_SETTINGS,
    coefficients: Coefficients | None = None,
) -> dict[float, tuple[float, float, float]]:
    """Return ``{clock: (tokens/J, iteration s, power W of all GPUs)}`` of a full decode batch
    at every supported clock (throttLL'eM's characterisation, a saturated engine)."""
    engine = create_engine(
        EngineConfig(gpu=gpu, model=model, tp=tp), coefficients=coefficients, clock_settings=clock
    )
    costs = engine.cost_model
    out: dict[float, tuple[float, float, float]] = {}
    kv = batch * context_tokens
    for mhz in engine.supported_clocks_mhz:
        cost = costs.cost_of(0, batch, kv, kv, batch, mhz)
        power = cost.power_w_per_gpu * tp
        out[mhz] = (batch / (cost.duration_s * power), cost.duration_s, power)
    return out


def throttllem_sweep(
    clock: ClockSettings = DEFAULT_CLOCK_SETTINGS,
    coefficients: Coefficients | None = None,
) -> dict[float, tuple[float, float, float]]:
    """:func:`saturated_tokens_per_joule` on throttLL'eM's characterisation engine (its full
    batch at the mean context of a 1-token prompt and its 1,024 output tokens)."""
    p = THROTTLLEM
    return saturated_tokens_per_joule(
        gpu=p.gpu, model=p.model, tp=p.tp, batch=p.batch,
        context_tokens=p.prompt_tokens + p.output_tokens / 2, clock=clock,
        coefficients=coefficients,
    )  # fmt: skip
