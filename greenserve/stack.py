"""The embedded local stack: which services run, with which settings.

One :class:`StackSpec` expands to one :class:`~shared.config.Settings` per process: the six
control services (or, with ``colocate_request_path``, the co-located request path
``greenserve.local.requestpath`` in place of classifier, scheduler and router), one dvfs
agent per node and N simulated workers spread over regions and models (one pool per region
and model, :func:`worker_placements`). ``greenserve up`` writes each as a YAML file and
starts ``python -m <module>`` processes (``services.<name>`` for a service); tests run the
same services in one event loop.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.config import ClassifierSettings, Settings
from shared.security.identities import COMPOSITE_ROLES, Identity

__all__ = [
    "CLOCK_AGENT_MODULE",
    "COLOCATED_CONTROL_SERVICES",
    "CONTROL_SERVICES",
    "REQUEST_PATH_MODULE",
    "REQUEST_PATH_SERVICES",
    "ServiceLaunch",
    "StackSpec",
    "check_regions",
    "identity_for",
    "missing_live_keys",
    "pool_id_for",
    "stack_launches",
    "with_settings",
    "worker_placements",
]

CONTROL_SERVICES = ("scheduler", "router", "planner", "forecaster", "classifier", "gateway")
"""Started before workers and dvfs agents, in this order (consumers before producers)."""
REQUEST_PATH_SERVICES = COMPOSITE_ROLES["requestpath"]
"""The services the co-located request path runs in one process."""
COLOCATED_CONTROL_SERVICES = ("requestpath", "planner", "forecaster", "gateway")
"""Control services with the request path co-located (``greenserve.local.requestpath``)."""
CLOCK_AGENT_MODULE = "services.clockd"
"""The node's clock agent: a process of the stack that uses neither NATS nor Redis."""
REQUEST_PATH_MODULE = "greenserve.local.requestpath"
"""The co-located request path: a launcher composing three services, so not one of them."""


def pool_id_for(region: str, gpu: str, model: str | None = None) -> str:
    """Pool name of one region's GPUs of one type, e.g. ``pjm-a100``, and with ``model`` of
    those serving it, e.g. ``pjm-a100-llama-2-13b`` (characters outside ids become ``-``)."""
    pool = f"{region.lower()}-{gpu.split('-')[0].lower()}"
    if model is None:
        return pool
    return f"{pool}-{re.sub(r'[^a-z0-9_-]', '-', model.lower())}"[:128]


@dataclass(frozen=True, slots=True, kw_only=True)
class StackSpec:
    """What to run."""

    namespace: str = "gs"
    nats_url: str = "nats://127.0.0.1:4222"
    """One server's URL or a cluster's comma list (``nats.url``)."""
    nats_replicas: int = 1
    """Replicas of each JetStream resource (``nats.replicas``): min(3, nodes) on a cluster."""
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_sentinels: tuple[str, ...] = ()
    """``host:port`` of each Sentinel (``redis.sentinels``); empty: ``redis_url`` alone."""
    redis_master_name: str = "greenserve"
    workers: int = 2
    regions: tuple[str, ...] = ("PJM", "CISO")
    gpu: str = "A100-80GB"
    model: str = "llama-3-8b"
    models: tuple[str, ...] = ()
    """The models served, the workers dealt out among them (:func:`worker_placements`);
    empty: ``model`` alone."""
    tp: int = 1
    max_num_seqs: int = 64
    speedup: float = 1.0
    origin_wall_s: float = 0.0
    gateway_port: int = 0
    """Port of the OpenAI-compatible HTTP ingress; 0 lets the OS pick (tests)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Further settings sections merged into every process (e.g. ``{"scheduler": {...}}``)."""
    colocate_request_path: bool = False
    """Run classifier, scheduler and router as one process (``greenserve.local.requestpath``) that
    hands requests between them in memory; False runs them as three processes on NATS."""
    gpu_clocks: str = "off"
    """``nvml``: run the clock agent (``services.clockd``) and give worker i the GPUs
    ``i*tp .. i*tp+tp-1`` of this machine, whose clocks its clock commands lock."""
    clock_agent_socket: str = ""
    """The clock agent's socket (``gpu_clocks`` nvml)."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("a stack needs at least one worker")
        if not self.regions:
            raise ValueError("a stack needs at least one region")
        if len(set(self.models)) != len(self.models):
            raise ValueError(f"a model is named twice in {list(self.models)}")
        if self.workers < len(self.served_models):
            raise ValueError(
                f"{len(self.served_models)} models need at least as many workers, "
                f"not {self.workers}"
            )
        check_regions(self.regions, **_zone_settings(self.extra))
        if self.gpu_clocks not in ("off", "nvml"):
            raise ValueError(f"gpu_clocks is off or nvml, not {self.gpu_clocks!r}")
        if self.gpu_clocks == "nvml" and not self.clock_agent_socket:
            raise ValueError("gpu_clocks nvml needs the clock agent's socket")

    @property
    def served_models(self) -> tuple[str, ...]:
        """The models the stack's workers serve, in the order they are dealt out."""
        return self.models or (self.model,)


def worker_placements(spec: StackSpec) -> list[tuple[str, str]]:
    """(region, model) of each worker, by worker index.

    Workers go to the models in turn (worker ``i`` serves model ``i mod M``), and each
    model's workers go to the regions in turn: 4 workers, 2 models and regions PJM, CISO
    give model A on PJM and CISO and model B on PJM and CISO. Dealing both from one index
    would tie each model to some regions only (2 models, 2 regions: A on PJM alone).
    """
    models = spec.served_models
    return [
        (spec.regions[(i // len(models)) % len(spec.regions)], models[i % len(models)])
        for i in range(spec.workers)
    ]


def _zone_settings(extra: dict[str, Any]) -> dict[str, Any]:
    """The forecaster's ``source`` and ``zones`` in ``extra``, for :func:`check_regions`."""
    forecaster = extra.get("forecaster", {})
    return {"source": forecaster.get("source"), "zones": forecaster.get("zones")}


def check_regions(
    regions: Sequence[str],
    source: str | None = None,
    zones: Mapping[str, Any] | None = None,
) -> list[str]:
    """The region token (zone code) of every zone in ``regions``, refusing a zone the
    forecaster has no carbon data or settings for (:mod:`shared.zones`).

    The forecaster reads each zone's history at start-up; a zone without one would end it
    after the stack reported ready. ``source`` prefixes bare codes; ``zones`` are the
    forecaster's per-zone settings (files, time zone, holiday calendar).

    Raises:
        ValueError: naming the zone and what is missing for it.
    """
    from shared.zones import ZoneError, ZoneRegistry, ZoneSettings

    try:
        registry = ZoneRegistry.from_settings(
            {k: ZoneSettings.model_validate(v) for k, v in (zones or {}).items()}
        )
        names = [r if ":" in r or source is None else f"{source}:{r}" for r in regions]
        return [zone.code for zone in registry.resolve_all(names)]
    except ZoneError as exc:
        raise ValueError(str(exc)) from None


def missing_live_keys(
    regions: Sequence[str],
    source: str | None = None,
    zones: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """What live mode lacks in ``environ`` (default: this process's environment, which the
    stack's forecaster inherits): one line per zone whose provider's credentials are not
    all set, naming the zone, the provider and the variables. Empty when nothing is missing.

    Without its keys a zone's live feed never polls and every answer is the model's
    fallback, a stack that looks live and is not; ``greenserve up --carbon-mode live``
    refuses to start instead.

    Raises:
        ValueError: a zone that does not resolve (:func:`check_regions`).
    """
    from shared.zones import LIVE_KEY_ENV, ZoneError, ZoneRegistry, ZoneSettings

    env = os.environ if environ is None else environ
    try:
        registry = ZoneRegistry.from_settings(
            {k: ZoneSettings.model_validate(v) for k, v in (zones or {}).items()}
        )
        names = [r if ":" in r or source is None else f"{source}:{r}" for r in regions]
        resolved = registry.resolve_all(names)
    except ZoneError as exc:
        raise ValueError(str(exc)) from None
    problems = []
    for zone in resolved:
        unset = [name for name in LIVE_KEY_ENV[zone.live_provider] if not env.get(name)]
        if unset:
            problems.append(
                f"zone {zone.name} reads {zone.live_provider}, which needs "
                f"{' and '.join(unset)} in the environment"
            )
    return problems


@dataclass(frozen=True, slots=True)
class ServiceLaunch:
    """One process of the stack."""

    name: str
    """Unique process name, e.g. ``worker-3`` or ``dvfs-node-pjm``."""
    module: str
    """Service package run with ``python -m``."""
    settings: Settings


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _module_of(name: str) -> str:
    return REQUEST_PATH_MODULE if name == "requestpath" else f"services.{name}"


def stack_launches(spec: StackSpec) -> list[ServiceLaunch]:
    """Every process of the stack with its settings, in start order."""
    # Pools, nodes and workers are named by the zone's code (a subject token): eia:ERCO
    # runs as region ERCO; the forecaster reads the zone names.
    codes = check_regions(spec.regions, **_zone_settings(spec.extra))
    code_of = dict(zip(spec.regions, codes, strict=True))
    placed = [(code_of[region], model) for region, model in worker_placements(spec)]
    used_regions = [region for region, _ in placed]
    regions = sorted(set(used_regions), key=codes.index)
    several = len(spec.served_models) > 1

    def pool_of(region: str, model: str) -> str:
        # One model keeps the pool ids of a one-model stack (``pjm-a100``).
        return pool_id_for(region, spec.gpu, model if several else None)

    pools = [
        {
            "pool_id": pool_of(region, model),
            "region": region,
            "gpu": spec.gpu,
            "tp": spec.tp,
            "instances": placed.count((region, model)),
            "model": model,
        }
        for model in spec.served_models
        for region in regions
        if (region, model) in placed
    ]
    common: dict[str, Any] = {
        "namespace": spec.namespace,
        "nats": {"url": spec.nats_url, "replicas": spec.nats_replicas},
        "redis": {
            "url": spec.redis_url,
            "sentinels": list(spec.redis_sentinels),
            "master_name": spec.redis_master_name,
        },
        "clock": {"speedup": spec.speedup, "origin_wall_s": spec.origin_wall_s},
        "planner": {"static_pools": pools},
        "forecaster": {"regions": list(spec.regions)},
        "gateway": {"port": spec.gateway_port},
    }
    accepted = ClassifierSettings().models
    if not set(spec.served_models) <= set(accepted):
        # The classifier refuses models outside its list (``unknown_model``).
        common["classifier"] = {
            "models": [*accepted, *(m for m in spec.served_models if m not in accepted)]
        }

    def settings(**sections: Any) -> Settings:
        return Settings(**_merge(_merge(common, spec.extra), sections))

    control = COLOCATED_CONTROL_SERVICES if spec.colocate_request_path else CONTROL_SERVICES
    launches = [ServiceLaunch(name, _module_of(name), settings()) for name in control]
    clocked: dict[str, Any] = {}
    if spec.gpu_clocks == "nvml":
        clocked = {"gpu_clocks": "nvml", "clock_agent_socket": spec.clock_agent_socket}
        launches.append(ServiceLaunch("clockd", CLOCK_AGENT_MODULE, settings(worker=clocked)))
    for region in regions:
        node = f"node-{region.lower()}"
        launches.append(
            ServiceLaunch(f"dvfs-{node}", "services.dvfs", settings(dvfs={"node_id": node}))
        )
    for i, (region, model) in enumerate(placed):
        worker = {
            "worker_id": f"worker-{i}",
            "pool_id": pool_of(region, model),
            "region": region,
            "node_id": f"node-{region.lower()}",
            "gpu": spec.gpu,
            "model": model,
            "tp": spec.tp,
            "max_num_seqs": spec.max_num_seqs,
        }
        if clocked:
            worker |= clocked | {"nvml_gpu_indices": list(range(i * spec.tp, (i + 1) * spec.tp))}
        launches.append(ServiceLaunch(f"worker-{i}", "services.worker", settings(worker=worker)))
    return launches


def identity_for(launch: ServiceLaunch) -> Identity:
    """The NATS/Redis identity of one process: its name, role and (worker, node) scope."""
    role = launch.module.rsplit(".", 1)[-1]
    scope = {
        "worker": launch.settings.worker.worker_id,
        "dvfs": launch.settings.dvfs.node_id,
    }.get(role)
    node = launch.settings.worker.node_id if role == "worker" else None  # node-bound clock
    return Identity(launch.name, role, scope, node)


def with_settings(
    launches: list[ServiceLaunch], overrides: dict[str, dict[str, Any]]
) -> list[ServiceLaunch]:
    """The launches with per-process settings sections merged in (by process name)."""
    out = []
    for launch in launches:
        extra = overrides.get(launch.name)
        if extra:
            merged = _merge(launch.settings.model_dump(exclude_none=True), extra)
            launch = ServiceLaunch(launch.name, launch.module, Settings(**merged))
        out.append(launch)
    return out
