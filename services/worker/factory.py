"""Build the worker's engine backend from its settings (``worker.backend``)."""

from __future__ import annotations

from typing import Final

from services.worker.backend import WorkerBackend
from services.worker.energy_meter import EnergyMeter
from services.worker.gpu_clocks import AgentClockedBackend
from services.worker.instant_backend import InstantBackend
from services.worker.sim_backend import SimBackend
from services.worker.vllm_backend import VllmBackend
from shared.config import Settings
from shared.engine import EngineConfig, create_engine
from shared.gpu import NvmlReader
from shared.gpu.clock_agent import ClockAgentClient

__all__ = ["BACKENDS", "build_backend"]

BACKENDS: Final = ("sim", "instant", "vllm")
"""Values ``worker.backend`` accepts."""


def build_backend(settings: Settings) -> WorkerBackend:
    """The engine backend named by ``settings.worker.backend``.

    Raises:
        ValueError: for an unknown backend name, (``sim``) an unknown GPU or model, or
            GPU clocks through the clock agent without the instance's GPU indices.
    """
    backend = _engine_backend(settings)
    cfg = settings.worker
    if cfg.gpu_clocks == "nvml":
        return AgentClockedBackend(
            backend,
            ClockAgentClient(cfg.clock_agent_socket, settings.nats.request_timeout_s),
            cfg.nvml_gpu_indices,
            cfg.worker_id,
        )
    return backend


def _engine_backend(settings: Settings) -> WorkerBackend:
    cfg = settings.worker
    if cfg.backend == "sim":
        engine = create_engine(
            EngineConfig(gpu=cfg.gpu, model=cfg.model, tp=cfg.tp, max_num_seqs=cfg.max_num_seqs)
        )
        return SimBackend(engine, settings.clock.speedup)
    if cfg.backend == "instant":
        return InstantBackend(gpu=cfg.gpu, model=cfg.model, tp=cfg.tp)
    if cfg.backend == "vllm":
        return _vllm_backend(settings)
    raise ValueError(f"unknown worker backend {cfg.backend!r}; choose one of {', '.join(BACKENDS)}")


def _vllm_backend(settings: Settings) -> VllmBackend:
    cfg = settings.worker
    meter = EnergyMeter(NvmlReader(cfg.nvml_gpu_indices)) if cfg.nvml_gpu_indices else EnergyMeter()
    return VllmBackend(
        cfg.vllm_url,
        gpu=cfg.gpu,
        model=cfg.model,
        tp=cfg.tp,
        meter=meter,
        clock_url=cfg.clock_url,
        connect_timeout_s=settings.nats.connect_timeout_s,
        scrape_timeout_s=settings.nats.request_timeout_s,
        read_timeout_s=cfg.vllm_read_timeout_s,
    )
