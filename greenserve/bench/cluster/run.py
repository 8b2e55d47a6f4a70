"""``greenserve bench cluster``: a policy against the papers' peak-sized baselines.

Runs, in the offline simulator on the 3-region scenario, the peak-sized SinglePool (found by
a bisection over its size on the measured window), the whole inventory always on (a
secondary, labelled row), MultiPool sized per class, the carbon-aware static placement, the
headline policy and its alternatives, over an Azure-format trace (1 h of ``conv`` by default,
or ``--window START_S:END_S`` of it). Savings are against the peak-sized SinglePool.

Heavy modules (the simulator, the policy registry) are imported inside :func:`run`, so
``greenserve --help`` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenserve.argtypes import UsageError, positive_float
from loadgen.simulator.policy_names import ABLATION_LEVERS, CLI_POLICY_NAMES, DEFAULT_SET

if TYPE_CHECKING:
    from loadgen.simulator.baselines import SizedBaselines
    from loadgen.simulator.results import SimResult

__all__ = ["HELP", "NAME", "add_arguments", "parse_window", "run"]

NAME = "cluster"
HELP = "a policy vs the peak-sized SinglePool in the offline simulator: energy/CO2 at SLO"

DEFAULT_POLICY = DEFAULT_SET
"""The headline: the product's default, built from the live planner settings
(``loadgen.simulator.policies.policy_from_settings``)."""

DEFAULT_OPTIONS = tuple(f"{DEFAULT_SET}-{lever}" for lever in ABLATION_LEVERS)
"""The default with one lever switched off each, reported beside it (the ablation table)."""

BASELINES = frozenset({"single-pool", "multi-pool", "max-clock-fcfs-rr"})
"""Sets that the selection rule never picks (they are what GreenServe is compared with)."""

SELECTION_RULE = (
    "selected_by_rule = the lowest-energy set, among every non-baseline set run, whose SLO "
    "attainment is >= 99 %"
)

GOALS = {"energy_saving_pct": 40.0, "co2_saving_pct": 60.0, "slo_attainment_pct": 99.0}
"""The issue's goals against the peak-sized SinglePool (issue 28), not a paper figure."""

SLO_BASIS = (
    "slo_attainment_pct: share of the requests the model can serve at all that met their SLO "
    "(the basis the baseline is sized on); a request refused for its size (beyond the model's "
    "context, never fitting a KV cache) is refused by every set alike and is counted under "
    "rejected; slo_attainment_all_pct counts those refusals as misses"
)

FULL_FLEET_LABEL = (
    "secondary: SinglePool over the whole inventory, every TP8 instance always on (not sized "
    "to the trace; savings against it overstate what a policy achieves)"
)


def parse_window(text: str) -> tuple[float, float]:
    """``START_S:END_S`` (seconds of the trace) → ``(start, end)``.

    Raises:
        argparse.ArgumentTypeError: unless ``0 <= START_S < END_S``.
    """
    start, sep, end = text.partition(":")
    try:
        window = (float(start), float(end))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not START_S:END_S in seconds") from None
    if not sep or not 0.0 <= window[0] < window[1] or window[1] == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 <= START_S < END_S")
    return window


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Trace, window, scenario and policy options (names checked in :func:`run`)."""
    parser.add_argument("--trace", default="conv", help="Azure-format CSV or alias (conv, code)")
    parser.add_argument("--scenario", type=Path, default=Path("scenarios/three_region.yaml"))
    parser.add_argument(
        "--duration",
        type=positive_float,
        default=None,
        help="trace seconds to replay from its start (default 3600; same as --window 0:S)",
    )
    parser.add_argument(
        "--window",
        type=parse_window,
        default=None,
        metavar="START_S:END_S",
        help="report on requests arriving in this part of the trace (e.g. 1800:3600, minutes "
        "30-60); the run warms up on what precedes it, and the baselines are sized on it",
    )
    parser.add_argument(
        "--warmup-s",
        type=positive_float,
        default=None,
        help="seconds before the window that are simulated but not reported (default: all)",
    )
    parser.add_argument("--policy", default=DEFAULT_POLICY, help="the headline policy set")
    parser.add_argument(
        "--option",
        action="append",
        help="further policy sets whose energy/SLO trade-off is reported (repeatable)",
    )
    parser.add_argument(
        "--no-options", action="store_true", help="run no alternative sets (baselines only)"
    )
    parser.add_argument("--no-progress", action="store_true")


def _window(args: argparse.Namespace) -> tuple[float, float, float]:
    """(load from, measure from, end) seconds of the trace."""
    if args.window is not None and args.duration is not None:
        raise UsageError("give --window or --duration, not both")
    start, end = args.window or (0.0, args.duration or 3600.0)
    warmup = start if args.warmup_s is None else min(start, args.warmup_s)
    return start - warmup, start, end


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Size the baselines, simulate the policy and the options; return savings and sizes."""
    from datetime import timedelta

    from loadgen.simulator.baselines import size_baselines
    from loadgen.simulator.carbon import CarbonClock
    from loadgen.simulator.compare import SimRunner
    from loadgen.simulator.policies import SIMULATOR_SIDE, policy_by_name
    from loadgen.simulator.scenario import load_scenario
    from loadgen.traces import TraceFormatError, read_azure_trace, resolve_trace

    names = [args.policy, *(() if args.no_options else (args.option or DEFAULT_OPTIONS))]
    unknown = sorted({n for n in names if n not in CLI_POLICY_NAMES})
    if unknown:
        raise UsageError(f"unknown policy set(s) {', '.join(unknown)}; see greenserve simulate")
    load_from, start, end = _window(args)
    scenario = load_scenario(args.scenario)
    path = resolve_trace(args.trace)
    try:
        loaded = read_azure_trace(path, start_s=load_from, duration_s=end - load_from)
        # Rows it cannot use, counted over the window alone (as the simulator's refusals).
        dropped = read_azure_trace(path, start_s=start, duration_s=end - start).dropped
    except TraceFormatError as error:
        raise UsageError(str(error)) from None
    measure_from = start - load_from
    if not any(t.t_s >= measure_from for t in loaded.requests):
        raise UsageError(f"trace {args.trace!r} has no servable request in [{start}, {end}) s")
    # Simulated second 0 is the first loaded second: the carbon clock moves with it.
    scenario = scenario.model_copy(
        update={"start_utc": scenario.start_utc + timedelta(seconds=load_from)}
    )
    trace = loaded.requests
    span = max(t.t_s for t in trace) + 3600.0
    carbon = CarbonClock.from_eia(
        [(r.name, r.carbon) for r in scenario.regions], scenario.start_utc, span
    )
    runner = SimRunner(scenario, measure_from_s=measure_from, show_progress=not args.no_progress)
    goal = GOALS["slo_attainment_pct"] / 100.0
    baselines = size_baselines(
        scenario, trace, runner.run, goal=goal, measure_from_s=measure_from, carbon=carbon
    )
    options = [n for n in dict.fromkeys(names[1:]) if n != args.policy]
    ours = runner.run(policy_by_name(args.policy), trace)
    others = {name: runner.run(policy_by_name(name), trace) for name in options}
    base = baselines.single
    trade_off = {name: _row(r, base, baselines.full_fleet) for name, r in others.items()}
    trade_off[args.policy] = _row(ours, base, baselines.full_fleet)
    eligible = [
        (r.energy_j, name)
        for name, r in {args.policy: ours, **others}.items()
        if name not in BASELINES and _attained(r) >= goal
    ]
    headline = _row(ours, base, baselines.full_fleet)
    headline["policy"] = args.policy
    headline["goals_met"] = all(
        headline[k] is not None and headline[k] >= goal_value for k, goal_value in GOALS.items()
    )
    return {
        "baseline": _baseline(base, baselines),
        "baseline_full_fleet": {**_summary(baselines.full_fleet), "label": FULL_FLEET_LABEL},
        "multi_pool": _multi(baselines),
        "carbon_aware_baseline": _carbon(baselines),
        "headline": headline,
        "selected_by_rule": min(eligible)[1] if eligible else None,
        "selection_rule": SELECTION_RULE,
        "goal": GOALS,
        "slo_basis": SLO_BASIS,
        "policy": args.policy,
        "scenario": scenario.name,
        "trace": args.trace,
        "window_s": {"start": start, "end": end, "warmup": measure_from},
        "requests": ours.requests,
        "rejected": _rejected(ours, dropped),
        "gpus": scenario.total_gpus,
        "trade_off": trade_off,
        "ablation": _ablation(args.policy, ours, others, base),
        "simulator_side": SIMULATOR_SIDE,
        "wall_s": runner.wall_s,
        "per_policy": {name: _detail(r) for name, r in {args.policy: ours, **others}.items()},
    }


def _attained(result: SimResult) -> float:
    """SLO attainment over the servable requests (:data:`SLO_BASIS`); 0 when none was."""
    from loadgen.simulator.sizing import servable_attainment

    share = servable_attainment(result)
    return 0.0 if share != share else share


def _slo(result: SimResult) -> dict[str, float]:
    """The SLO columns of a row (:data:`SLO_BASIS`)."""
    return {
        "slo_attainment_pct": 100.0 * _attained(result),
        "slo_attainment_all_pct": 100.0 * result.summary.overall.slo_attainment,
    }


def _summary(result: SimResult) -> dict[str, Any]:
    """A run's size, SLO, energy, CO2 and node use."""
    return {
        "policy": result.policy,
        "gpus": result.max_gpus,
        "instances": result.max_instances,
        **_slo(result),
        "energy_wh": result.energy_j / 3600.0,
        "co2_kg": result.co2_kg,
        "node_hours": result.node_hours,
        "node_power_ons": result.node_power_ons,
        "bare_idle_energy_wh": result.bare_energy_j / 3600.0,
    }


def _baseline(result: SimResult, baselines: SizedBaselines) -> dict[str, Any]:
    from loadgen.simulator.sizing import SINGLE_POOL_RULE

    search = baselines.single_search
    return {
        **_summary(result),
        "gpu_type": baselines.gpu,
        "sized_by": SINGLE_POOL_RULE,
        "size_found": search.passed,
        "probes_slo_pct": {str(n): 100.0 * a for n, a in sorted(search.probes.items())},
    }


def _multi(baselines: SizedBaselines) -> dict[str, Any]:
    from loadgen.simulator.sizing import MULTI_POOL_RULE

    sizes = {name: s.instances for name, s in baselines.multi_searches.items()}
    row = _summary(baselines.multi) if baselines.multi is not None else {"policy": "multi-pool"}
    return {**row, "class_instances": sizes, "sized_by": MULTI_POOL_RULE,
            "note": baselines.multi_note or None}  # fmt: skip


def _carbon(baselines: SizedBaselines) -> dict[str, Any]:
    from loadgen.simulator.sizing import CARBON_AWARE_RULE

    if baselines.carbon_aware is None:
        return {"policy": "single-pool", "region": None, "note": baselines.carbon_note}
    return {
        **_summary(baselines.carbon_aware),
        "region": baselines.carbon_region,
        "mean_intensity_g_per_kwh": baselines.region_intensity,
        "sized_by": CARBON_AWARE_RULE,
    }


def _saving(value: float, reference: float) -> float | None:
    return 100.0 * (1.0 - value / reference) if reference > 0 else None


def _row(result: SimResult, base: SimResult, full: SimResult) -> dict[str, Any]:
    """Savings against the peak-sized SinglePool (and the whole inventory, secondary)."""
    return {
        "energy_saving_pct": _saving(result.energy_j, base.energy_j),
        "co2_saving_pct": _saving(result.co2_kg, base.co2_kg),
        **_slo(result),
        "energy_wh": result.energy_j / 3600.0,
        "co2_kg": result.co2_kg,
        "gpu_hours": result.gpu_hours,
        "node_hours": result.node_hours,
        "node_power_ons": result.node_power_ons,
        "scale_events": result.scale_events,
        "vs_full_fleet": {
            "energy_saving_pct": _saving(result.energy_j, full.energy_j),
            "co2_saving_pct": _saving(result.co2_kg, full.co2_kg),
        },
        "description": result.description,
    }


def _ablation(
    policy: str, ours: SimResult, others: dict[str, SimResult], base: SimResult
) -> list[dict[str, Any]]:
    """One row per lever switched off (``<policy>-<lever>`` sets that ran): its SLO and
    savings, and what the lever is worth (the default's saving minus the ablation's)."""
    rows = []
    mine = _row(ours, base, base)
    for lever in ABLATION_LEVERS:
        result = others.get(f"{policy}-{lever}")
        if result is None:
            continue
        row = _row(result, base, base)
        rows.append(
            {
                "lever_off": lever,
                "slo_attainment_pct": row["slo_attainment_pct"],
                "energy_saving_pct": row["energy_saving_pct"],
                "co2_saving_pct": row["co2_saving_pct"],
                "lever_energy_pts": _minus(mine["energy_saving_pct"], row["energy_saving_pct"]),
                "lever_co2_pts": _minus(mine["co2_saving_pct"], row["co2_saving_pct"]),
            }
        )
    return rows


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _rejected(result: SimResult, dropped: dict[str, int]) -> dict[str, Any]:
    """Refusals in the window: the simulator's, by cause (``too_long``: beyond the model's
    context; ``kv_cache``: never fits the KV cache), and the trace rows it could not use
    (``empty_output``, ``empty_prompt``, ``bad_row``: a time or count that does not parse)."""
    reasons = dict(result.rejected_by_reason)
    for reason, count in dropped.items():
        reasons[reason] = reasons.get(reason, 0) + count
    return {"count": sum(reasons.values()), "by_reason": dict(sorted(reasons.items()))}


def _detail(result: SimResult) -> dict[str, Any]:
    row = result.as_dict()
    row.pop("summary", None)
    return row
