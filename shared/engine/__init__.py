"""The simulated GPU engine: interface in :mod:`shared.engine.api`, model in ``simulated``.

Supported GPU types: :data:`shared.engine.hardware.GPUS` (A100-80GB, H100-80GB). Supported
model shapes: :data:`shared.engine.hardware.MODELS` (Llama-2-7B/13B/70B, Llama-3(.1)-8B/70B,
Qwen3-8B/32B). Build an engine with :func:`create_engine`.
"""

from shared.engine.api import (
    Engine,
    EngineConfig,
    EngineRequest,
    IterationResult,
    IterationRun,
    MultiStepEngine,
)
from shared.engine.clock import DEFAULT_CLOCK_SETTINGS, ClockSettings
from shared.engine.hardware import GPUS, MODELS, GpuSpec, ModelShape, gpu_spec, model_shape
from shared.engine.simulated import SimulatedEngine, create_engine

__all__ = [
    "DEFAULT_CLOCK_SETTINGS",
    "GPUS",
    "MODELS",
    "ClockSettings",
    "Engine",
    "EngineConfig",
    "EngineRequest",
    "GpuSpec",
    "IterationResult",
    "IterationRun",
    "ModelShape",
    "MultiStepEngine",
    "SimulatedEngine",
    "create_engine",
    "gpu_spec",
    "model_shape",
]
