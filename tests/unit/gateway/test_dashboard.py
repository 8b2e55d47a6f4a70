"""The Grafana dashboard only queries metrics the services actually export."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

import services.gateway.app
import services.router.recovery
import services.worker.gpu_meters
import shared.counters

DASHBOARD = Path(__file__).resolve().parents[3] / "dashboards" / "greenserve.json"


def _exported() -> set[str]:
    # Importing the modules registers their metrics (the names keep the imports used).
    registered = (
        shared.counters.ERRORS,
        services.gateway.app.HTTP_REQUESTS,
        services.gateway.app.CELL_REQUESTS,
        services.router.recovery.ADOPTED,
        services.worker.gpu_meters.GPU_MODEL_S,
    )
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    names: set[str] = set()
    for family in REGISTRY.collect():
        names.add(family.name)
        names.update(family.name + s for s in suffixes.get(family.type, ()))
    assert all(m._name in names for m in registered)
    return names


def test_every_metric_the_dashboard_queries_is_exported() -> None:
    """Test that no dashboard expression names a metric no service registers."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queried = {m for e in exprs for m in re.findall(r"greenserve_[a-z0-9_]+", e)}
    assert queried
    assert queried - _exported() == set()
