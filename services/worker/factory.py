"""Build the worker's engine backend from its settings (``worker.backend``)."""

from __future__ import annotations

from typing import Final

from services.worker.backend import WorkerBackend
from services.worker.instant_backend import InstantBackend
from services.worker.sim_backend import SimBackend
from shared.config import Settings
from shared.engine import EngineConfig, create_engine

__all__ = ["BACKENDS", "build_backend"]

BACKENDS: Final = ("sim", "instant", "vllm")
"""Values ``worker.backend`` accepts."""


def build_backend(settings: Settings) -> WorkerBackend:
    """The engine backend named by ``settings.worker.backend``.

    Raises:
        ValueError: for an unknown backend name, or (``sim``) an unknown GPU or model.
    """
    cfg = settings.worker
    if cfg.backend == "sim":
        engine = create_engine(
            EngineConfig(gpu=cfg.gpu, model=cfg.model, tp=cfg.tp, max_num_seqs=cfg.max_num_seqs)
        )
        return SimBackend(engine, settings.clock.speedup)
    if cfg.backend == "instant":
        return InstantBackend(gpu=cfg.gpu, model=cfg.model, tp=cfg.tp)
    raise ValueError(f"unknown worker backend {cfg.backend!r}; choose one of {', '.join(BACKENDS)}")
