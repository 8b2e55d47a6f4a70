"""Request traces: the Azure LLM inference format, or synthetic Poisson/Gamma arrivals."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from shared.paths import data_path

__all__ = [
    "TRACE_ALIASES",
    "AzureTrace",
    "TraceFormatError",
    "TraceRequest",
    "load_azure_trace",
    "read_azure_trace",
    "resolve_trace",
    "synthetic_trace",
]

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


class TraceFormatError(ValueError):
    """A trace file that is not a usable Azure-format CSV (no rows, missing columns)."""


@dataclass(frozen=True, slots=True)
class AzureTrace:
    """A window of an Azure-format trace and the rows it could not use, by reason."""

    requests: list[TraceRequest]
    dropped: dict[str, int]
    """Rows of the window left out: ``bad_row`` (a timestamp or token count that does not
    parse), ``empty_prompt`` (ContextTokens <= 0), ``empty_output`` (GeneratedTokens <= 0;
    the live gateway refuses ``max_tokens`` < 1)."""


def read_azure_trace(
    path: Path,
    *,
    start_s: float = 0.0,
    duration_s: float | None = None,
    max_requests: int | None = None,
) -> AzureTrace:
    """Read ``TIMESTAMP,ContextTokens,GeneratedTokens`` rows of any length mix and order.

    Times become offsets from ``start_s`` seconds after the earliest timestamp, in time
    order (rows need not be sorted); the window is ``[start_s, start_s + duration_s)``.

    Raises:
        TraceFormatError: for a file without those columns or without any data row.
    """
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise TraceFormatError(f"{path} is empty, not an Azure-format trace") from None
    missing = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} - set(frame.columns)
    if missing:
        raise TraceFormatError(
            f"{path} is not an Azure-format trace: missing columns {sorted(missing)}"
        )
    if frame.empty:
        raise TraceFormatError(f"{path} has a header but no request rows")
    stamps = pd.to_datetime(frame["TIMESTAMP"], format="mixed", errors="coerce")
    prompts = pd.to_numeric(frame["ContextTokens"], errors="coerce")
    outputs = pd.to_numeric(frame["GeneratedTokens"], errors="coerce")
    ok = (stamps.notna() & prompts.notna() & outputs.notna()).to_numpy()
    if not ok.any():
        raise TraceFormatError(f"{path} has no row with a valid timestamp and token counts")
    offsets = (stamps - stamps[ok].min()).dt.total_seconds().to_numpy()
    prompt = prompts.fillna(0).to_numpy()
    output = outputs.fillna(0).to_numpy()
    # An unparseable row has no time: it counts as dropped whatever the window.
    window = ~ok | (offsets >= start_s)
    if duration_s is not None:
        window &= ~ok | (offsets < start_s + duration_s)
    timed = window & ok
    dropped = {
        "bad_row": int((window & ~ok).sum()),
        "empty_prompt": int((timed & (prompt <= 0)).sum()),
        "empty_output": int((timed & (prompt > 0) & (output <= 0)).sum()),
    }
    keep = timed & (prompt > 0) & (output > 0)
    order = np.argsort(offsets[keep], kind="stable")
    times = (offsets[keep] - start_s)[order]
    out = [
        TraceRequest(float(t), int(p), int(o))
        for t, p, o in zip(times, prompt[keep][order], output[keep][order], strict=True)
    ]
    requests = out[:max_requests] if max_requests is not None else out
    return AzureTrace(requests, {k: v for k, v in dropped.items() if v})


def load_azure_trace(
    path: Path,
    *,
    start_s: float = 0.0,
    duration_s: float | None = None,
    max_requests: int | None = None,
) -> list[TraceRequest]:
    """Read ``TIMESTAMP,ContextTokens,GeneratedTokens``; times become offsets from the window start.

    Rows with non-positive or unreadable token counts are dropped (the model cannot serve
    them); :func:`read_azure_trace` also says how many.

    Raises:
        TraceFormatError: for a file without those columns or without any data row.
    """
    return read_azure_trace(
        path, start_s=start_s, duration_s=duration_s, max_requests=max_requests
    ).requests


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
