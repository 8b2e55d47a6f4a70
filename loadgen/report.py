"""Turn a replay into the shared run summary, a terminal table and a JSON file.

Latencies are reported in model time (wall × speed-up), as the simulated GPUs experienced
them; the dispatch overhead (ingress publish → worker accepted) is the control plane's own
cost and is reported in wall milliseconds. Energy is the workers' counters (idle included);
CO2 multiplies each counter increment by the region's measured hourly intensity.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from loadgen.replay import ClientRecord, ReplayResult
from proto.messages import Completion
from shared.clock import ModelClock
from shared.metrics.energy import JOULES_PER_KWH
from shared.metrics.records import RequestRecord, RequestStatus
from shared.metrics.summary import EnergyAccount, summarize

__all__ = ["build_report", "judged_lat_s", "print_report", "replay_records"]


@cache
def _intensity(region: str) -> pd.Series | None:
    from loadgen.simulator.carbon import zone_history
    from shared.paths import DataDirError
    from shared.zones import ZoneError

    try:
        # A region is named by its zone's code (eia:ERCO runs as ERCO).
        return zone_history(region).intensity.dropna()
    except (DataDirError, FileNotFoundError, ZoneError):
        return None


def _energy(result: ReplayResult, clock: ModelClock) -> EnergyAccount:
    total_j = 0.0
    co2_g = 0.0
    co2_known = True
    for worker in result.workers.values():
        samples = sorted(worker.samples)
        if len(samples) < 2:
            continue
        total_j += samples[-1][1] - samples[0][1]
        series = _intensity(worker.region)
        if series is None:
            co2_known = False
            continue
        for (t0, e0), (_, e1) in itertools.pairwise(samples):
            stamp = pd.Timestamp(clock.model_at(t0), unit="s", tz="UTC").floor("h")
            position = min(int(series.index.searchsorted(stamp)), len(series) - 1)
            co2_g += (e1 - e0) / JOULES_PER_KWH * float(series.iloc[position])
    return EnergyAccount(energy_j=total_j, co2_kg=co2_g / 1000.0 if co2_known else None)


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def judged_lat_s(done: Completion) -> float:
    """Lat (FREESH Eq. 6), the bound the request's E2E is judged against (5 × Lat), as the
    simulator judges every policy: the request's true lengths replayed alone on an idle
    instance of the configuration that served it, at its GPU's maximum clock
    (:mod:`shared.engine.unloaded`). A completion that does not name a configuration the
    engine knows (senders that predate ``gpu``/``tp``, a model without a shape) is judged on
    its pool's profile and its true output; one without the profile keeps ``lat_s``."""
    if done.gpu and done.tp and done.model:
        try:
            return _unloaded_s(done.gpu, done.model, done.tp, done.input_tokens,
                               max(1, done.output_tokens))  # fmt: skip
        except ValueError:
            pass
    if done.profile_tbt_ms <= 0.0 and done.profile_ttft_ms <= 0.0:
        return done.lat_s
    return (done.output_tokens * done.profile_tbt_ms + done.profile_ttft_ms) / 1000.0


def _unloaded_s(gpu: str, model: str, tp: int, prompt: int, output: int) -> float:
    from shared.engine.api import EngineConfig
    from shared.engine.unloaded import unloaded_latency_s

    return unloaded_latency_s(EngineConfig(gpu=gpu, model=model, tp=tp), prompt, output)


def replay_records(result: ReplayResult) -> list[RequestRecord]:
    """Per-request records of a replay in model time, seconds from the replay start."""
    k = result.speedup
    t0 = result.started_at
    records: list[RequestRecord] = []
    for rec in result.records:
        done = rec.completion
        if done:
            status = RequestStatus.OK
        else:
            status = RequestStatus.FAILED if rec.error else RequestStatus.TIMEOUT
        times = [rec.token_times[i] for i in sorted(rec.token_times)]
        records.append(
            RequestRecord(
                request_id=rec.request_id,
                request_class=done.request_class if done else "?",
                arrival_s=(rec.sent_at - t0) * k,
                latency_budget_s=judged_lat_s(done) if done else math.nan,
                first_token_s=(times[0] - t0) * k if times else None,
                finish_s=(times[-1] - t0) * k if done and times else None,
                output_tokens=done.output_tokens if done else len(times),
                predicted_output_tokens=done.predicted_output_tokens if done else 0,
                prompt_tokens=rec.trace.prompt_tokens,
                status=status,
                token_times_s=[(t - t0) * k for t in times],
            )
        )
    return records


def build_report(result: ReplayResult, clock: ModelClock) -> dict[str, Any]:
    """Summarise a replay: counts, latency percentiles, SLO metrics, energy and CO2."""
    k = result.speedup
    t0 = result.started_at
    records = replay_records(result)
    overheads_ms = [
        (r.completion.accepted_at - r.sent_at) * 1000.0 for r in result.records if r.completion
    ]
    summary = summarize(records, energy=_energy(result, clock))
    completed = sum(1 for r in result.records if r.completion)
    failed = sum(1 for r in result.records if r.error)
    mismatched = sum(
        1
        for r in result.records
        if r.completion
        and (
            r.completion.output_tokens != r.trace.output_tokens
            or len(r.token_times) != r.trace.output_tokens
        )
    )
    span_model_s = max((result.finished_at - t0) * k, 1e-9)
    overall = summary.overall.as_dict()
    errors: dict[str, int] = {}
    for r in result.records:
        if r.error:
            errors[r.error.code] = errors.get(r.error.code, 0) + 1
    return {
        "requests": len(result.records),
        "completed": completed,
        "failed": failed,
        "lost": len(result.records) - completed - failed,
        "duplicated": sum(r.duplicate_endings for r in result.records),
        "token_mismatch": mismatched,
        "errors": errors,
        "throughput_rps": completed / span_model_s,
        "p50_ttft_ms": _ms(overall["ttft_s"].get("p50")),
        "p99_ttft_ms": _ms(overall["ttft_s"].get("p99")),
        "p50_tbt_ms": _ms(overall["tbt_s"].get("p50")),
        "p99_tbt_ms": _ms(overall["tbt_s"].get("p99")),
        "p50_e2e_ms": _ms(overall["e2e_s"].get("p50")),
        "p99_e2e_ms": _ms(overall["e2e_s"].get("p99")),
        "p50_dispatch_overhead_ms": _pct(overheads_ms, 50),
        "p99_dispatch_overhead_ms": _pct(overheads_ms, 99),
        "slo_attainment": overall["slo_attainment"],
        "violation_rate": overall["violation_rate"],
        "jain": overall["jain"],
        "energy_wh": summary.energy_wh,
        "co2_kg": summary.co2_kg,
        "tokens_per_joule": summary.tokens_per_joule,
        "speedup": k,
        "wall_s": result.finished_at - t0,
        "per_class": {name: s.as_dict() for name, s in summary.per_class.items()},
        "per_model": per_model(result.records),
    }


def per_model(records: Sequence[ClientRecord]) -> dict[str, dict[str, Any]]:
    """Per model asked for: requests, completions, errors and the workers that completed
    them (with how many each): in a stack of several models each model's completions must
    come from its own workers only."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        entry = out.setdefault(r.model, {"requests": 0, "completed": 0, "failed": 0, "workers": {}})
        entry["requests"] += 1
        if r.completion is not None:
            entry["completed"] += 1
            workers = entry["workers"]
            workers[r.completion.worker_id] = workers.get(r.completion.worker_id, 0) + 1
        elif r.error is not None:
            entry["failed"] += 1
    for entry in out.values():
        entry["workers"] = dict(sorted(entry["workers"].items()))
    return dict(sorted(out.items()))


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def print_report(report: dict[str, Any], console: Console | None = None) -> None:
    """Print the summary as two tables: outcome and latency (model ms)."""
    console = console or Console(stderr=True)
    outcome = Table(title="GreenServe replay")
    for col in (
        "requests",
        "completed",
        "failed",
        "lost",
        "req/s",
        "energy Wh",
        "CO2 kg",
        "tok/J",
    ):
        outcome.add_column(col, justify="right")
    outcome.add_row(
        str(report["requests"]),
        str(report["completed"]),
        str(report["failed"]),
        str(report["lost"]),
        _fmt(report["throughput_rps"]),
        _fmt(report["energy_wh"]),
        _fmt(report["co2_kg"], 4),
        _fmt(report["tokens_per_joule"]),
    )
    console.print(outcome)
    latency = Table(title="latency (model time, ms)")
    latency.add_column("metric")
    for col in ("p50", "p99"):
        latency.add_column(col, justify="right")
    for name in ("ttft", "tbt", "e2e"):
        latency.add_row(
            name.upper(), _fmt(report[f"p50_{name}_ms"]), _fmt(report[f"p99_{name}_ms"])
        )
    latency.add_row(
        "dispatch overhead (wall)",
        _fmt(report["p50_dispatch_overhead_ms"]),
        _fmt(report["p99_dispatch_overhead_ms"]),
    )
    console.print(latency)
    console.print(
        f"SLO attainment {_fmt(report['slo_attainment'], 4)}  violation rate "
        f"{_fmt(report['violation_rate'], 4)}  Jain fairness {_fmt(report['jain'], 3)}  "
        f"errors {report['errors']}"
    )
    models = report.get("per_model", {})
    if len(models) > 1:
        served = Table(title="models (completions by worker)")
        for col in ("model", "requests", "completed", "failed", "workers"):
            served.add_column(col, justify="left" if col in ("model", "workers") else "right")
        for name, entry in models.items():
            workers = ", ".join(f"{w} {n}" for w, n in entry["workers"].items())
            served.add_row(
                name, str(entry["requests"]), str(entry["completed"]), str(entry["failed"]),
                workers or "-",
            )  # fmt: skip
        console.print(served)


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
