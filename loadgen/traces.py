"""Request traces: the Azure LLM inference format, or synthetic Poisson/Gamma arrivals."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from shared.paths import data_path

__all__ = ["TRACE_ALIASES", "TraceRequest", "load_azure_trace", "resolve_trace", "synthetic_trace"]

TRACE_ALIASES = {
    "conv": ("traces", "AzureLLMInferenceTrace_conv.csv"),
    "code": ("traces", "AzureLLMInferenceTrace_code.csv"),
}
"""Short names for the public traces in the data directory."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace: when (seconds from the trace start) and how big."""

    t_s: float
    prompt_tokens: int
    output_tokens: int


def resolve_trace(name_or_path: str) -> Path:
    """A trace alias (``conv``, ``code``) or a path to an Azure-format CSV."""
    if name_or_path in TRACE_ALIASES:
        return data_path(*TRACE_ALIASES[name_or_path])
    path = Path(name_or_path)
    if not path.exists():
        raise FileNotFoundError(
            f"trace {name_or_path!r} is neither {sorted(TRACE_ALIASES)} nor a file"
        )
    return path


def load_azure_trace(
    path: Path,
    *,
    start_s: float = 0.0,
    duration_s: float | None = None,
    max_requests: int | None = None,
) -> list[TraceRequest]:
    """Read ``TIMESTAMP,ContextTokens,GeneratedTokens``; times become offsets from the window start.

    Rows with non-positive token counts are dropped (the model cannot serve them).
    """
    frame = pd.read_csv(path)
    missing = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} - set(frame.columns)
    if missing:
        raise ValueError(f"{path} is not an Azure-format trace: missing columns {sorted(missing)}")
    stamps = pd.to_datetime(frame["TIMESTAMP"], format="mixed")
    offsets = (stamps - stamps.iloc[0]).dt.total_seconds().to_numpy()
    mask = (offsets >= start_s) & (frame["ContextTokens"] > 0) & (frame["GeneratedTokens"] > 0)
    if duration_s is not None:
        mask &= offsets < start_s + duration_s
    chosen = frame[mask]
    times = offsets[mask] - start_s
    out = [
        TraceRequest(float(t), int(p), int(o))
        for t, p, o in zip(times, chosen["ContextTokens"], chosen["GeneratedTokens"], strict=True)
    ]
    return out[:max_requests] if max_requests is not None else out


def synthetic_trace(
    *,
    rate_rps: float,
    duration_s: float,
    seed: int = 0,
    cv: float = 1.0,
    mean_prompt_tokens: int = 1000,
    mean_output_tokens: int = 200,
) -> list[TraceRequest]:
    """Poisson (cv = 1) or Gamma (cv ≠ 1) arrivals with log-normal token counts."""
    rng = np.random.default_rng(seed)
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate_rps * shape)
    n_guess = int(rate_rps * duration_s * 1.5) + 16
    gaps = rng.gamma(shape, scale, size=n_guess)
    times = np.cumsum(gaps)
    times = times[times < duration_s]
    sigma = 0.8
    prompts = rng.lognormal(np.log(mean_prompt_tokens) - sigma**2 / 2, sigma, size=len(times))
    outputs = rng.lognormal(np.log(mean_output_tokens) - sigma**2 / 2, sigma, size=len(times))
    return [
        TraceRequest(float(t), max(1, int(p)), max(1, int(o)))
        for t, p, o in zip(times, prompts, outputs, strict=True)
    ]
