"""Typed settings, loaded once in each service's ``__main__`` and passed down.

Sources, highest priority first: keyword arguments, environment variables
(``GREENSERVE_<SECTION>__<FIELD>``, e.g. ``GREENSERVE_WORKER__GPU=H100-80GB``), one YAML
config file named by ``GREENSERVE_CONFIG``, then the fields' defaults. Every period, timeout
and limit carries its unit in its name.

This module holds the root :class:`Settings` and its loading; each section is defined in
``shared/settings/`` (connections, request path, node, planning, gateway) and importable
from here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from shared.settings.connections import (
    ClockSettings,
    NatsSettings,
    RedisSettings,
    TelemetrySettings,
)
from shared.settings.gateway import GatewaySettings
from shared.settings.node import DvfsSettings, WorkerSettings
from shared.settings.planning import ForecasterSettings, PlannerSettings
from shared.settings.request_path import ClassifierSettings, RouterSettings, SchedulerSettings

__all__ = [
    "CONFIG_FILE_ENV",
    "ClassifierSettings",
    "ClockSettings",
    "DvfsSettings",
    "ForecasterSettings",
    "GatewaySettings",
    "NatsSettings",
    "PlannerSettings",
    "RedisSettings",
    "RouterSettings",
    "SchedulerSettings",
    "Settings",
    "TelemetrySettings",
    "WorkerSettings",
    "load_settings",
]

CONFIG_FILE_ENV = "GREENSERVE_CONFIG"


class Settings(BaseSettings):
    """Every setting of a GreenServe deployment."""

    model_config = SettingsConfigDict(
        env_prefix="GREENSERVE_",
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
    )

    namespace: str = "gs"
    """Prefix of every subject, stream and Redis key of this stack."""
    data_dir: Path | None = None
    nats: NatsSettings = NatsSettings()
    redis: RedisSettings = RedisSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
    clock: ClockSettings = ClockSettings()
    classifier: ClassifierSettings = ClassifierSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    router: RouterSettings = RouterSettings()
    worker: WorkerSettings = WorkerSettings()
    dvfs: DvfsSettings = DvfsSettings()
    forecaster: ForecasterSettings = ForecasterSettings()
    planner: PlannerSettings = PlannerSettings()
    gateway: GatewaySettings = GatewaySettings()
    shutdown_timeout_s: float = 5.0

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Add the YAML file named by ``GREENSERVE_CONFIG`` below the environment."""
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(CONFIG_FILE_ENV)
        if config_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_file))
        sources.append(file_secret_settings)
        return tuple(sources)


def load_settings(**overrides: Any) -> Settings:
    """Load settings from the environment and config file, with explicit overrides on top."""
    settings = Settings(**overrides)
    if settings.data_dir is not None:
        # shared.paths reads the environment, so one data dir serves every module.
        os.environ.setdefault("GREENSERVE_DATA_DIR", str(settings.data_dir))
    return settings
