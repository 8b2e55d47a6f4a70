"""``greenserve bench engine-real``: the engine model against iterations measured on a real GPU.

The engine is calibrated on published measurements (``engine-accuracy``). This bench checks
it against hardware: ``shared.gpu.decoder_probe`` times prefill and decode iterations of a
Llama-3-8B-shaped decoder on an H100 under CUDA graphs, with NVML energy and clocks (read-only:
the probe sets no clock or limit), and the engine prices the same iterations
(``shared.engine.real_check``).

By default it compares the probe runs shipped in ``shared/gpu/measurements`` (measured on a
lent H100; the file names the GPU, driver and PyTorch build). ``--measure`` runs the probe on
this machine first (needs PyTorch with CUDA and ``nvidia-ml-py``) and compares that run.

The headline is the ``compiled`` run (``torch.compile`` fuses each layer's small kernels, as
vLLM's fused kernels do) against the engine's hardware terms (host overheads zero: the probe
has no scheduler). The ``eager`` run and the engine as shipped (vLLM host overheads) are
reported beside it.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

from greenserve.bench.engine_real.options import HELP, NAME, add_arguments
from shared.engine.real_check import (
    MEASUREMENTS_DIR,
    PointComparison,
    compare_measurement,
    load_measurement,
    summarise,
)

__all__ = ["HELP", "NAME", "add_arguments", "run"]

DEFAULT_RUNS = ("h100-llama-3-8b-compiled.json", "h100-llama-3-8b-eager.json")


def _row(p: PointComparison) -> dict[str, Any]:
    return {
        "kind": p.kind,
        "batch": p.batch,
        "tokens": p.tokens,
        "observed_clock_mhz": None if p.observed_clock_mhz is None else round(p.observed_clock_mhz),
        "measured_ms": round(p.measured_s * 1e3, 3),
        "predicted_hw_ms": round(p.predicted_gpu_s * 1e3, 3),
        "predicted_vllm_ms": round(p.predicted_s * 1e3, 3),
        "measured_w": None if p.measured_w is None else round(p.measured_w, 1),
        "predicted_hw_w": round(p.predicted_gpu_w, 1),
        "time_error_pct": round(p.time_error_pct, 2),
        "power_error_pct": None if p.power_error_pct is None else round(p.power_error_pct, 2),
    }


def _report(raw: dict[str, Any], source: str) -> dict[str, Any]:
    points = compare_measurement(raw)
    return {
        "source": source,
        "gpu": raw.get("gpu_name"),
        "driver": raw.get("driver"),
        "torch": raw.get("torch_version"),
        "compiled": bool(raw.get("compiled", False)),
        "model": raw["shape"]["name"],
        "idle_power_w": raw.get("idle_power_w"),
        "power_limit_w": raw.get("power_limit_w"),
        "supported_sm_clocks_mhz": _clock_range(raw.get("supported_sm_clocks_mhz") or []),
        "summary": summarise(points),
        "points": [_row(p) for p in points],
        "_comparisons": points,
    }


def _clock_range(clocks: list[float]) -> dict[str, float] | None:
    if not clocks:
        return None
    steps = sorted({round(b - a, 3) for a, b in itertools.pairwise(clocks)})
    return {"min": min(clocks), "max": max(clocks), "count": len(clocks), "step": steps[0]}


def _measure(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from shared.gpu.decoder_probe import run_probe

    result = run_probe(
        compiled=args.compile,
        progress=lambda msg: print(f"[probe] {msg}", file=sys.stderr, flush=True),
    ).to_json()
    if args.save:
        import json

        args.save.write_text(json.dumps(result, indent=1) + "\n")
    return result, "measured now"


def _plot(reports: list[dict[str, Any]], out: Path) -> list[str]:
    from shared.metrics.headless import plt

    out.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    for report in reports:
        comps: list[PointComparison] = report["_comparisons"]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
        for kind, marker in (("prefill", "o"), ("decode", "s")):
            mine = [c for c in comps if c.kind == kind]
            axes[0].scatter(
                [c.measured_s * 1e3 for c in mine],
                [c.predicted_gpu_s * 1e3 for c in mine],
                marker=marker,
                label=kind,
            )
            axes[1].scatter(
                [c.measured_w or 0.0 for c in mine],
                [c.predicted_gpu_w for c in mine],
                marker=marker,
                label=kind,
            )
        for ax, unit in ((axes[0], "iteration ms"), (axes[1], "power W")):
            lo, hi = ax.get_xlim()
            lo2, hi2 = ax.get_ylim()
            lim = (min(lo, lo2), max(hi, hi2))
            ax.plot(lim, lim, color="grey", linewidth=0.8)
            ax.set_xlabel(f"measured {unit}")
            ax.set_ylabel(f"engine model {unit}")
            ax.legend()
        axes[0].set_xscale("log")
        axes[0].set_yscale("log")
        variant = "compiled" if report["compiled"] else "eager"
        fig.suptitle(f"{report['model']} on {report['gpu']} ({variant} probe)")
        fig.tight_layout()
        path = out / f"engine_real_{variant}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(str(path))
    return written


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Compare and return the headline summary with every run's detail."""
    reports: list[dict[str, Any]] = []
    if args.measure:
        raw, source = _measure(args)
        reports.append(_report(raw, source))
    paths = args.measured or ([] if args.measure else [MEASUREMENTS_DIR / n for n in DEFAULT_RUNS])
    for path in paths:
        reports.append(_report(load_measurement(path), str(path)))
    head = reports[0]
    summary = head["summary"]
    result: dict[str, Any] = {
        "gpu": head["gpu"],
        "model": head["model"],
        "headline_run": head["source"],
        "tbt_median_ape": summary["tbt_hardware"]["median_ape"],
        "ttft_median_ape": summary["ttft_hardware"]["median_ape"],
        "decode_power_median_ape": summary["tbt_power"]["median_ape"],
        "prefill_power_median_ape": summary["ttft_power"]["median_ape"],
        "decode_energy_median_ape": summary["tbt_energy"]["median_ape"],
        "prefill_energy_median_ape": summary["ttft_energy"]["median_ape"],
        "note": (
            "engine hardware terms (no vLLM host overhead) at the GPU's maximum clock vs "
            "CUDA-graph iterations of a Llama-3-8B-shaped decoder with random bf16 weights; "
            "the probe reads NVML and sets nothing. *_median_ape: median absolute % error."
        ),
    }
    if args.plots:
        result["plots"] = _plot(reports, args.plots)
    for report in reports:
        report.pop("_comparisons")
    result["runs"] = reports
    return result
