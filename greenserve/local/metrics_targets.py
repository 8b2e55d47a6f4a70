"""Every process of a local stack on a metrics port, and the Prometheus targets file naming them.

``greenserve up`` gives each service process its own ``telemetry.metrics_port`` (a free
port, unless the spec fixes one), so the per-service counters (cancellations, errors,
clock changes) are reachable without looking for them. The ports are written into each
process's settings file, so a process the supervisor starts again serves on the same one.

The stack's targets are written as a Prometheus file-service-discovery file
(``file_sd_configs``): one group per process, labelled with its service, process name and
namespace, at :data:`TARGETS_FILE` in the state dir.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from greenserve.stack import ServiceLaunch, with_settings
from shared.servers import free_ports

__all__ = ["TARGETS_FILE", "metrics_urls", "with_metrics_ports", "write_targets"]

TARGETS_FILE = Path("prometheus") / "targets.json"
"""Where in a stack's state dir its Prometheus file-SD targets are written."""


def with_metrics_ports(launches: list[ServiceLaunch]) -> list[ServiceLaunch]:
    """The launches with a metrics port each: a free one where the settings name none."""
    unset = [launch.name for launch in launches if launch.settings.telemetry.metrics_port is None]
    chosen = {
        name: {"telemetry": {"metrics_port": port}}
        for name, port in zip(unset, free_ports(len(unset)), strict=True)
    }
    return with_settings(launches, chosen)


def metrics_urls(launches: list[ServiceLaunch]) -> dict[str, str]:
    """Each process's ``/metrics`` URL, by process name (those with a metrics port)."""
    return {
        launch.name: f"http://{_host(launch)}:{launch.settings.telemetry.metrics_port}/metrics"
        for launch in launches
        if launch.settings.telemetry.metrics_port is not None
    }


def _host(launch: ServiceLaunch) -> str:
    host = launch.settings.telemetry.metrics_host
    # A wildcard bind is reached on loopback from this machine.
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


def write_targets(state_dir: Path, launches: list[ServiceLaunch], namespace: str) -> Path:
    """Write the stack's Prometheus file-SD targets; return the file.

    Written whole or not at all (Prometheus re-reads the file when it changes).
    """
    groups = [
        {
            "targets": [f"{_host(launch)}:{launch.settings.telemetry.metrics_port}"],
            "labels": {
                "job": "greenserve",
                "service": launch.module.rsplit(".", 1)[-1],
                "process": launch.name,
                "namespace": namespace,
            },
        }
        for launch in launches
        if launch.settings.telemetry.metrics_port is not None
    ]
    path = state_dir / TARGETS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_suffix(".tmp")
    staged.write_text(json.dumps(groups, indent=2))
    os.replace(staged, path)
    return path
