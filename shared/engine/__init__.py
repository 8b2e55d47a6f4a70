"""The simulated GPU engine: interface in :mod:`shared.engine.api`."""

from shared.engine.api import Engine, EngineConfig, EngineRequest, IterationResult

__all__ = ["Engine", "EngineConfig", "EngineRequest", "IterationResult"]
