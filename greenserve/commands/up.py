"""``greenserve up``: start nats-server, redis-server, every service and N simulated workers."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, cast

from greenserve.argtypes import positive_float, positive_int
from greenserve.commands._stack_args import add_stack_arguments, spec_from_args
from greenserve.local import STATE_FILE

if TYPE_CHECKING:
    from collections.abc import Mapping

    from greenserve.local import LocalStack
    from greenserve.stack import StackSpec
    from shared.gpu.clock_lock import ClockModule

__all__ = [
    "HELP",
    "NAME",
    "add_arguments",
    "gpu_clock_problem",
    "print_metrics",
    "run",
    "wait_in_foreground",
    "with_carbon_mode",
]

NAME = "up"
HELP = "start the embedded stack (NATS, Redis, all services, simulated workers)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Stack options plus --foreground."""
    add_stack_arguments(parser)
    parser.add_argument(
        "--foreground",
        action="store_true",
        help="stay attached until Ctrl-C, a greenserve down from another shell, or every "
        "service has exited; then stop the stack",
    )
    parser.add_argument(
        "--cells",
        type=positive_int,
        default=1,
        help="independent stacks on the same NATS and Redis (namespaces ns, ns1 …), the "
        "workers dealt out among them; every cell's API address spreads requests over all "
        "of them (with --secure each cell has its own servers and serves its own address); "
        "`down` stops all "
        "(docs/architecture.md, cells)",
    )
    parser.add_argument(
        "--nats-cluster",
        type=positive_int,
        default=1,
        metavar="N",
        help="run NATS as N nodes joined by routes, the ingress stream and its consumer "
        "replicated on min(3, N) of them; the services connect with every node's URL "
        "(docs/deploy.md, cluster)",
    )
    parser.add_argument(
        "--redis-sentinel",
        action="store_true",
        help="run Redis as a primary, a replica and three Sentinels; the services follow a "
        "failover to the promoted replica (docs/deploy.md, cluster)",
    )
    parser.add_argument(
        "--secure",
        action="store_true",
        help="per-service NATS users and Redis ACL users with generated passwords "
        "(in <state-dir>/secrets); replay and status use the loadgen and monitor identities",
    )
    parser.add_argument(
        "--no-supervise",
        action="store_true",
        help="do not restart a service, or a server started here, that exits (by default a "
        "supervisor restarts it with exponential backoff and counts it; greenserve status "
        "shows the restarts)",
    )
    parser.add_argument(
        "--restart-max-backoff-s",
        type=positive_float,
        default=30.0,
        help="longest wait of the supervisor before restarting a process that keeps exiting "
        "(the wait doubles from 0.5 s per restart in a row)",
    )
    parser.add_argument(
        "--gpu-clocks",
        choices=("off", "nvml"),
        default="off",
        help="nvml: on a node with NVIDIA GPUs, start the clock agent (services.clockd) and "
        "let each worker's clock commands lock the SM clock of its GPUs (worker i: GPUs "
        "i*tp..i*tp+tp-1) through NVML; needs nvidia-ml-py and root or CAP_SYS_ADMIN for "
        "the clocks to move (docs/gpu-clocks.md). Default off: simulated clocks only",
    )
    parser.add_argument(
        "--carbon-mode",
        choices=("live", "replay"),
        default=None,
        help="the carbon forecaster's mode (forecaster.mode): replay answers from the data "
        "files, each answer stamped with the data's time; live reads each zone's provider "
        "on the wall clock, with its credentials from the environment (Electricity Maps: "
        "ELECTRICITYMAPS_API_KEY; WattTime: WATTTIME_USERNAME, WATTTIME_PASSWORD; EIA: "
        "EIA_API_KEY), and refuses to start while one is missing (docs/forecaster.md). "
        "Default: the settings file's mode, else replay",
    )
    parser.add_argument(
        "--otlp-endpoint",
        type=_http_url,
        default=None,
        metavar="URL",
        help="export every service's traces over OTLP/HTTP to this collector (e.g. "
        "http://127.0.0.1:4318); default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or "
        "$OTEL_EXPORTER_OTLP_ENDPOINT if set, else tracing is off",
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        help="with --secure: TLS on NATS and Redis with a local CA (needs 'cryptography')",
    )


def _http_url(text: str) -> str:
    """An http(s) URL with a host, refused at parse time (each service would refuse it)."""
    from urllib.parse import urlsplit

    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"not an http(s) URL with a host: {text!r}")
    return text


def run(args: argparse.Namespace) -> int:
    """Start the stack (or its cells) and wait until it is ready."""
    # Imported here, not above: NATS, Redis and aiohttp are not needed for --help.
    from greenserve.local import start_cells, start_local_stack
    from greenserve.local.supervisor import SupervisorSettings
    from shared.security.secrets import redact_url

    supervise = (
        None
        if args.no_supervise
        else SupervisorSettings(
            max_backoff_s=args.restart_max_backoff_s,
            first_backoff_s=min(SupervisorSettings().first_backoff_s, args.restart_max_backoff_s),
        )
    )

    spec = with_carbon_mode(spec_from_args(args), args.carbon_mode)
    if args.gpu_clocks == "nvml":
        problem = gpu_clock_problem(args.workers * args.tp, args.cells)
        if problem:
            print(f"greenserve up: --gpu-clocks nvml: {problem}", file=sys.stderr)
            return 1
        socket = args.state_dir.resolve() / "clockd.sock"
        spec = replace(spec, gpu_clocks="nvml", clock_agent_socket=str(socket))

    stacks: list[LocalStack] = []
    failover = args.nats_cluster > 1 or args.redis_sentinel
    if failover and args.cells > 1:
        print("greenserve up: --nats-cluster/--redis-sentinel run one cell", file=sys.stderr)
        return 1
    try:
        if args.otlp_endpoint:
            telemetry = {**spec.extra.get("telemetry", {}), "otlp_endpoint": args.otlp_endpoint}
            spec = replace(spec, extra={**spec.extra, "telemetry": telemetry})
        if args.cells > 1:
            stacks = start_cells(
                spec,
                args.state_dir,
                args.cells,
                nats_url=args.nats_url,
                redis_url=args.redis_url,
                secure=args.secure,
                tls=args.tls,
                supervise=supervise,
            )
        else:
            stacks = [
                start_local_stack(
                    spec,
                    args.state_dir,
                    nats_url=args.nats_url,
                    redis_url=args.redis_url,
                    secure=args.secure,
                    tls=args.tls,
                    supervise=supervise,
                    nats_cluster=args.nats_cluster,
                    redis_sentinel=args.redis_sentinel,
                )
            ]
        for cell in stacks:
            cell.wait_ready()
    except (ValueError, RuntimeError) as exc:
        print(f"greenserve up failed: {exc}", file=sys.stderr)
        for cell in reversed(stacks):
            cell.stop()
        return 1
    stack = stacks[0]
    state = stack.state
    cells = f" (first of {len(stacks)} cells)" if len(stacks) > 1 else ""
    print(
        f"stack up{cells}: {state.workers} workers, namespace {state.namespace}, "
        f"NATS {redact_url(state.nats_url)}, Redis {redact_url(state.redis_url)}, "
        f"speed-up {state.speedup:g}; logs in {args.state_dir / 'logs'}",
        file=sys.stderr,
    )
    if state.nats_replicas > 1 or state.redis_sentinels:
        print(
            f"NATS JetStream replicas {state.nats_replicas}; Redis Sentinels "
            f"{', '.join(state.redis_sentinels) or 'none'} (master {state.redis_master_name})",
            file=sys.stderr,
        )
    if len(stacks) > 1 and state.secure:
        # Secured cells share no server, so each gateway reaches its own cell only.
        for i, cell in enumerate(stacks):
            print(
                f"OpenAI-compatible API of cell {i} (its own servers): {cell.state.gateway_url}/v1",
                file=sys.stderr,
            )
    else:
        spread = " (spreads requests over every cell)" if len(stacks) > 1 else ""
        print(f"OpenAI-compatible API: {state.gateway_url}/v1{spread}", file=sys.stderr)
    if state.secure:
        print(
            f"secure: one identity per service; passwords in {args.state_dir / 'secrets'}; "
            f"the API's key (Authorization: Bearer) in {args.state_dir / 'secrets' / 'api-key'}",
            file=sys.stderr,
        )
    if state.tls_ca_file:
        print(
            f"TLS on: for other tools, export SSL_CERT_FILE={state.tls_ca_file}",
            file=sys.stderr,
        )
    print_metrics(stacks)
    for cell in stacks[1:]:
        print(
            f"cell {cell.state.namespace}: {cell.state.workers} workers, OpenAI-compatible API "
            f"{cell.state.gateway_url}/v1; state in {cell.state_dir}",
            file=sys.stderr,
        )
    if not args.foreground:
        return 0
    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    why = wait_in_foreground(stacks, stopped)
    print(f"stopping the stack: {why}", file=sys.stderr)
    for cell in reversed(stacks):  # the first cell owns the servers
        cell.stop()
    return 0


def with_carbon_mode(
    spec: StackSpec, mode: str | None, environ: Mapping[str, str] | None = None
) -> StackSpec:
    """``spec`` with the forecaster in ``mode`` (``None``: the settings file's), checked:
    live mode needs every zone's provider credentials in ``environ`` (default: this
    process's, which the forecaster inherits).

    Raises:
        UsageError: live mode with a credential missing, naming each zone, its provider
            and the variables to set.
    """
    from greenserve.argtypes import UsageError
    from greenserve.stack import missing_live_keys

    forecaster = dict(spec.extra.get("forecaster", {}))
    if mode is not None:
        forecaster["mode"] = mode
        spec = replace(spec, extra={**spec.extra, "forecaster": forecaster})
    if forecaster.get("mode", "replay") != "live":
        return spec
    missing = missing_live_keys(
        spec.regions, forecaster.get("source"), forecaster.get("zones"), environ
    )
    if missing:
        raise UsageError(
            "--carbon-mode live: "
            + "; ".join(missing)
            + " (set them, or use --carbon-mode replay to answer from the data files)"
        )
    return spec


def gpu_clock_problem(gpus_needed: int, cells: int, nvml: ClockModule | None = None) -> str:
    """Why this machine cannot run ``--gpu-clocks nvml`` (empty when it can); reads only.

    ``nvml``: the NVML module (default: import ``pynvml``); tests pass a fake.
    """
    if cells > 1:
        return "one cell per GPU node; drop --cells"
    from shared.gpu import NvmlUnavailableError, load_nvml
    from shared.gpu.clock_lock import ClockRefusedError, count_gpus

    try:
        found = count_gpus(nvml if nvml is not None else cast("ClockModule", load_nvml()))
    except NvmlUnavailableError:
        return "needs the package nvidia-ml-py (pip install nvidia-ml-py, the 'gpu' extra)"
    except ClockRefusedError as exc:
        return f"no NVIDIA GPU found here ({exc})"
    if found < gpus_needed:
        return (
            f"the workers need {gpus_needed} GPUs (--workers times --tp) and this node has {found}"
        )
    return ""


def print_metrics(stacks: list[LocalStack]) -> None:
    """Say where each process serves ``/metrics`` and where the Prometheus targets file is."""
    for cell in stacks:
        state = cell.state
        if not state.metrics:
            continue
        print(f"metrics of namespace {state.namespace} (Prometheus /metrics):", file=sys.stderr)
        width = max(len(name) for name in state.metrics)
        for name, url in state.metrics.items():
            print(f"  {name:<{width}}  {url}", file=sys.stderr)
        print(f"Prometheus file_sd_configs targets: {state.metrics_targets_file}", file=sys.stderr)


def wait_in_foreground(
    stacks: list[LocalStack], stopped: threading.Event, poll_s: float = 1.0
) -> str:
    """Block until a signal, a ``greenserve down`` from another shell (it removes the state
    file) or the exit of every service; return which.

    Waiting for a signal alone outlived a ``down``: the foreground process stayed, holding
    its exited children as zombies, until someone pressed Ctrl-C.
    """
    while not stopped.wait(poll_s):
        if not (stacks[0].state_dir / STATE_FILE).exists():
            return "its state file is gone (greenserve down)"
        # poll() also reaps an exited child, so none is left a zombie meanwhile.
        if all(p.poll() is not None for cell in stacks for p in cell.group.procs.values()):
            return "every service has exited"
    return "signal"
