"""``greenserve bench engine-clock``: the engine's clock response beside the measured ones.

Prints the engine's own DynamoLLM Tables I–III (same model, GPU, load, TP, clocks and SLO
filter as the paper; protocol in :mod:`greenserve.bench.engine_clock.sweeps`) beside the paper's,
and throttLL'eM's A100 sweet spot and max-batch gain beside the engine's. The clock model is
fitted on the throttLL'eM points only (``tools/fit_clock.py``); DynamoLLM's tables are held out.

Goals (issue "Honest savings"): ``spearman_mean`` ≥ 0.8 over Table I's feasible cells per
class; ``optimum_match`` ≥ 6 of 9 classes; a U in clock in every class whose paper optimum is
an interior clock; throttLL'eM's sweet spot and tokens/J gain within ±15 %.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from greenserve.bench.engine_clock.options import HELP, NAME, add_arguments

__all__ = ["HELP", "NAME", "add_arguments", "run"]

GOALS = {"spearman_mean": 0.8, "optimum_match": 6, "throttllem_tolerance_pct": 15.0}


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    for rank, index in enumerate(order):
        ranks[index] = float(rank)
    return ranks


def spearman(a: list[float], b: list[float]) -> float | None:
    """Return Spearman's rank correlation (``None`` under 3 points)."""
    if len(a) < 3:
        return None
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    den = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return num / den if den else None


def compare_table(paper: Any, engine: dict[tuple[int, float], Any]) -> dict[str, Any]:
    """Compare one row of a paper table (cells by TP) with the engine's cells.

    Spearman runs over the paper's feasible cells; each optimum is the lowest-energy cell
    feasible under its own SLO check; the U test asks whether the engine's energy, at the
    paper's optimal TP, is lowest at an interior clock.
    """
    from greenserve.bench.engine_clock.paper import PAPER_CLOCKS_MHZ

    paper_cells = {
        (tp, mhz): value
        for tp, values in paper.items()
        for mhz, value in zip(PAPER_CLOCKS_MHZ, values, strict=True)
        if value is not None
    }
    pairs = [(v, engine[k].energy_wh) for k, v in paper_cells.items() if engine.get(k)]
    rho = spearman([p for p, _ in pairs], [e for _, e in pairs])
    paper_opt = min(paper_cells, key=paper_cells.__getitem__) if paper_cells else None
    feasible = {k: c.energy_wh for k, c in engine.items() if c is not None and c.feasible}
    engine_opt = min(feasible, key=feasible.__getitem__) if feasible else None
    u_expected = paper_opt is not None and paper_opt[1] not in (
        PAPER_CLOCKS_MHZ[0],
        PAPER_CLOCKS_MHZ[-1],
    )
    u_engine = False
    if paper_opt is not None:
        row = [engine[(paper_opt[0], mhz)] for mhz in PAPER_CLOCKS_MHZ]
        energies = [c.energy_wh for c in row if c is not None]
        if len(energies) == len(PAPER_CLOCKS_MHZ):
            lowest = energies.index(min(energies))
            u_engine = 0 < lowest < len(energies) - 1
    return {
        "spearman": rho,
        "paper_optimum": list(paper_opt) if paper_opt else None,
        "engine_optimum": list(engine_opt) if engine_opt else None,
        "optimum_match": paper_opt is not None and paper_opt == engine_opt,
        "u_expected": u_expected,
        "u_engine": u_engine,
        "paper_wh": {f"tp{tp}": list(v) for tp, v in paper.items()},
        "engine_wh": {
            f"tp{tp}": [
                None if engine.get((tp, m)) is None else round(engine[(tp, m)].energy_wh, 3)
                for m in PAPER_CLOCKS_MHZ
            ]
            for tp in paper
        },
        "engine_feasible": {
            f"tp{tp}": [
                bool(engine.get((tp, m)) and engine[(tp, m)].feasible) for m in PAPER_CLOCKS_MHZ
            ]
            for tp in paper
        },
    }


def _engine_cells(
    pools: Any, name: str, model: str, tps: float, seeds: int, coefficients: Any
) -> dict[Any, Any]:
    from greenserve.bench.engine_clock.paper import PAPER_CLOCKS_MHZ
    from greenserve.bench.engine_clock.sweeps import run_cell

    cells = {}
    for tp in (2, 4, 8):
        for mhz in PAPER_CLOCKS_MHZ:
            cells[(tp, mhz)] = run_cell(pools, name, model=model, tp=tp, clock_mhz=mhz, tps=tps,
                                        seeds=seeds, coefficients=coefficients)  # fmt: skip
    return cells


def _table_i(pools: Any, seeds: int, coefficients: Any) -> dict[str, Any]:
    from greenserve.bench.engine_clock.paper import TABLE_I

    table: dict[str, Any] = {}
    for name, paper in TABLE_I.items():
        print(f"engine-clock: Table I {name}", file=sys.stderr, flush=True)
        cells = _engine_cells(pools, name, "llama-2-70b", 2000.0, seeds, coefficients)
        table[name] = compare_table(paper, cells)
    return table


def _summary(table_i: dict[str, Any]) -> dict[str, Any]:
    """Spearman mean, optimum matches and U classes of a Table I comparison."""
    rhos = [row["spearman"] for row in table_i.values() if row["spearman"] is not None]
    return {
        "spearman_mean": sum(rhos) / len(rhos) if rhos else None,
        "optimum_match": sum(row["optimum_match"] for row in table_i.values()),
        "u_shape_classes": sorted(
            k for k, row in table_i.items() if row["u_expected"] and row["u_engine"]
        ),
        "u_shape_expected": sorted(k for k, row in table_i.items() if row["u_expected"]),
    }


def _throttllem() -> dict[str, Any]:
    from greenserve.bench.engine_clock.paper import THROTTLLEM as P
    from greenserve.bench.engine_clock.sweeps import throttllem_sweep

    sweep = throttllem_sweep()
    sweet = max(sweep, key=lambda mhz: sweep[mhz][0])
    top = sweep[P.max_clock_mhz]
    at = sweep[1050.0]
    gain = 100.0 * (at[0] / top[0] - 1.0)
    tbt = 100.0 * (at[1] / top[1] - 1.0)
    paper_sweet = P.sweet_spot_mhz
    paper_gain = P.tokens_per_joule_gain_pct_at_1050
    tol = GOALS["throttllem_tolerance_pct"] / 100.0
    below = sweep[P.worse_below_mhz - 15.0]
    return {
        "sweet_spot_mhz": {"engine": sweet, "paper": paper_sweet},
        "tokens_per_joule_gain_pct_at_1050": {"engine": round(gain, 2), "paper": paper_gain},
        "tbt_increase_pct_at_1050": {
            "engine": round(tbt, 2),
            "paper": P.tbt_increase_pct_at_1050,
        },
        "below_840_worse": below[0] < at[0] and below[1] > at[1],
        "power_max_over_min": round(top[2] / sweep[min(sweep)][2], 2),
        "within_15pct": abs(sweet - paper_sweet) <= tol * paper_sweet
        and abs(gain - paper_gain) <= tol * paper_gain,
    }


def _h100_saturated() -> dict[str, Any]:
    """The saturated H100 optimum (a full decode batch): where J/token is lowest."""
    from greenserve.bench.engine_clock.sweeps import saturated_tokens_per_joule

    out: dict[str, Any] = {}
    for tp in (4, 8):
        sweep = saturated_tokens_per_joule(
            gpu="H100-80GB", model="llama-2-70b", tp=tp, batch=128, context_tokens=700
        )
        out[f"tp{tp}"] = max(sweep, key=lambda mhz: sweep[mhz][0])
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run Tables I–III on the engine and the throttLL'eM sweep; return the comparison."""
    from greenserve.bench.engine_clock.paper import TABLE_II, TABLE_III
    from greenserve.bench.engine_clock.sweeps import (
        DYNAMOLLM_STACK,
        class_pools,
        stack_coefficients,
    )
    from loadgen.traces import resolve_trace

    stack = args.stack or DYNAMOLLM_STACK
    pools = class_pools(resolve_trace(args.trace))
    coefficients = stack_coefficients(stack)
    table_i = _table_i(pools, args.seeds, coefficients)
    table_ii = {
        f"{tps:g}_tps": compare_table(paper, _engine_cells(pools, "MM", "llama-2-70b", tps,
                                                           args.seeds, coefficients))
        for tps, paper in TABLE_II.items()
    }  # fmt: skip
    table_iii = {
        model: compare_table(paper, _engine_cells(pools, "MM", model, 2000.0, args.seeds,
                                                  coefficients))
        for model, paper in TABLE_III.items()
    }  # fmt: skip
    other = "vllm" if stack != "vllm" else "splitwise"
    other_summary = _summary(_table_i(pools, args.seeds, stack_coefficients(other)))
    summary = _summary(table_i)
    spearman_mean = summary["spearman_mean"]
    matches = summary["optimum_match"]
    u_engine, u_expected = summary["u_shape_classes"], summary["u_shape_expected"]
    throttllem = _throttllem()
    report: dict[str, Any] = {
        "spearman_mean": spearman_mean,
        "optimum_match": matches,
        "classes": len(table_i),
        "u_shape_classes": u_engine,
        "u_shape_expected": u_expected,
        "throttllem": throttllem,
        "h100_saturated_optimum_mhz": _h100_saturated(),
        "goals_met": {
            "spearman_mean": spearman_mean is not None and spearman_mean >= GOALS["spearman_mean"],
            "optimum_match": matches >= GOALS["optimum_match"],
            "u_shape": u_engine == u_expected,
            "throttllem": throttllem["within_15pct"],
        },
        "stack": stack,
        f"table_i_summary_{other}_stack": other_summary,
        "table_i": table_i,
        "table_ii_held_out": table_ii,
        "table_iii_held_out": table_iii,
        "protocol": "one H100 instance, Poisson arrivals of the class for 30 s at the load "
        "(prompt + output tokens/s), energy from the first arrival until the last request "
        "finishes, mean of --seeds runs; SLO: p99 TTFT within Table IV's limit by input class "
        "and p99 TBT <= 100 ms; clocks 795 (paper 800), 1200, 1605 (1600), 1980 MHz after NVML "
        f"snapping; host overheads of the {stack!r} serving stack",
    }
    if getattr(args, "plots", None) is not None:
        from greenserve.bench.engine_clock.paper import PAPER_CLOCKS_MHZ, THROTTLLEM
        from greenserve.bench.engine_clock.plots import plot_table_i, plot_throttllem
        from greenserve.bench.engine_clock.sweeps import throttllem_sweep

        report["plots"] = [
            str(plot_table_i(table_i, PAPER_CLOCKS_MHZ, args.plots / "engine_clock_table_i.png")),
            str(plot_throttllem(throttllem_sweep(), THROTTLLEM,
                                args.plots / "engine_clock_throttllem.png")),
        ]  # fmt: skip
    return report
