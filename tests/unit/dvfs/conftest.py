"""Fixtures for the DVFS cores: engine config, and the IPS model trained once per session."""

from __future__ import annotations

import pytest

from services.dvfs.perf_model import (
    IpsModel,
    PrefillModel,
    fit_ips_model,
    profile_engine,
    profile_prefill,
)
from shared.engine import EngineConfig, create_engine

ENGINE_CONFIG = EngineConfig(gpu="A100-80GB", model="llama-3-8b")


@pytest.fixture(scope="session")
def engine_config() -> EngineConfig:
    """Llama3-8B on one A100, the instance of both DVFS papers' single-GPU studies."""
    return ENGINE_CONFIG


@pytest.fixture(scope="session")
def ips_model() -> IpsModel:
    """The IPS model fitted on the engine's profiler data (about 2 s, once per session)."""
    return fit_ips_model(profile_engine(lambda: create_engine(ENGINE_CONFIG)))


@pytest.fixture(scope="session")
def prefill_model() -> PrefillModel:
    """Prefill seconds per token against clock, timed on the engine."""
    return profile_prefill(lambda: create_engine(ENGINE_CONFIG))
