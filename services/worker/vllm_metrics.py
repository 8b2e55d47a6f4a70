"""vLLM's Prometheus metric names and a small parser for the text exposition format.

vLLM renamed its KV-cache gauge: v0 and early v1 publish ``vllm:gpu_cache_usage_perc``,
current releases ``vllm:kv_cache_usage_perc`` (both a fraction, 1 = 100 %). Both are read;
the newer name wins when a server publishes both. ``vllm:cache_config_info`` carries the
block count and block size as labels, which turns the fraction into blocks. The
``greenserve:*`` series are published only by ``greenserve sim-engine`` (its simulated
GPU's clock and energy counter); a real vLLM server has none.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CACHE_CONFIG_INFO",
    "ENERGY_J",
    "GENERATION_TOKENS",
    "KV_USAGE_NAMES",
    "KV_USAGE_NEW",
    "KV_USAGE_OLD",
    "MODEL_TIME_S",
    "NUM_PREEMPTIONS",
    "PROMPT_TOKENS",
    "REQUESTS_RUNNING",
    "REQUESTS_WAITING",
    "SM_CLOCK_MHZ",
    "EngineMetrics",
    "Samples",
    "parse_prometheus",
    "read_engine_metrics",
]

REQUESTS_RUNNING: Final = "vllm:num_requests_running"
REQUESTS_WAITING: Final = "vllm:num_requests_waiting"
KV_USAGE_NEW: Final = "vllm:kv_cache_usage_perc"
KV_USAGE_OLD: Final = "vllm:gpu_cache_usage_perc"
KV_USAGE_NAMES: Final = (KV_USAGE_NEW, KV_USAGE_OLD)
"""Preferred first."""
CACHE_CONFIG_INFO: Final = "vllm:cache_config_info"
PROMPT_TOKENS: Final = "vllm:prompt_tokens_total"
GENERATION_TOKENS: Final = "vllm:generation_tokens_total"
NUM_PREEMPTIONS: Final = "vllm:num_preemptions_total"
SM_CLOCK_MHZ: Final = "greenserve:sm_clock_mhz"
ENERGY_J: Final = "greenserve:energy_joules_total"
MODEL_TIME_S: Final = "greenserve:model_time_seconds"

Samples = dict[str, list[tuple[dict[str, str], float]]]
"""Metric name → (labels, value) of each series."""

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> Samples:
    """Parse the Prometheus text format; comments and malformed lines are skipped."""
    samples: Samples = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels_raw, value_raw = match.groups()
        try:
            value = float(value_raw)
        except ValueError:
            continue
        labels = dict(_LABEL.findall(labels_raw or ""))
        samples.setdefault(name, []).append((labels, value))
    return samples


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineMetrics:
    """What the worker needs from one scrape; ``None`` where the server did not say."""

    running: int = 0
    waiting: int = 0
    kv_usage: float | None = None
    """KV-cache use as a fraction in [0, 1]."""
    kv_blocks_total: int | None = None
    block_size: int | None = None
    clock_mhz: float | None = None
    energy_j: float | None = None
    model_time_s: float | None = None
    generation_tokens: float = 0.0

    @property
    def clock_control(self) -> bool:
        """Whether the server is a ``greenserve sim-engine`` (it then serves ``POST /clock``)."""
        return self.clock_mhz is not None


def _total(samples: Samples, name: str) -> float | None:
    """Sum over series (data-parallel engines publish one series each)."""
    series = samples.get(name)
    if not series:
        return None
    values = [v for _, v in series if math.isfinite(v)]
    return sum(values) if values else None


def _mean(samples: Samples, name: str) -> float | None:
    series = samples.get(name)
    values = [v for _, v in series or () if math.isfinite(v)]
    return sum(values) / len(values) if values else None


def _label_ints(samples: Samples, name: str, label: str) -> list[int]:
    """Integer values of one label over the series of ``name`` (``None`` labels skipped)."""
    values = (labels.get(label, "") for labels, _ in samples.get(name, ()))
    return [int(raw) for raw in values if raw.isdigit()]


def read_engine_metrics(text: str) -> EngineMetrics:
    """Extract running/waiting requests, KV use, block counts, clock and energy from a scrape."""
    samples = parse_prometheus(text)
    blocks = _label_ints(samples, CACHE_CONFIG_INFO, "num_gpu_blocks")
    block_sizes = _label_ints(samples, CACHE_CONFIG_INFO, "block_size")
    kv_usage = next((u for u in (_mean(samples, n) for n in KV_USAGE_NAMES) if u is not None), None)
    return EngineMetrics(
        running=round(_total(samples, REQUESTS_RUNNING) or 0.0),
        waiting=round(_total(samples, REQUESTS_WAITING) or 0.0),
        kv_usage=None if kv_usage is None else min(1.0, max(0.0, kv_usage)),
        kv_blocks_total=sum(blocks) if blocks else None,
        block_size=block_sizes[0] if block_sizes else None,
        clock_mhz=_mean(samples, SM_CLOCK_MHZ),
        energy_j=_total(samples, ENERGY_J),
        model_time_s=_mean(samples, MODEL_TIME_S),
        generation_tokens=_total(samples, GENERATION_TOKENS) or 0.0,
    )
