"""Arguments shared by commands that start a stack or replay onto one."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenserve.argtypes import non_negative_float, port, positive_float, positive_int
from greenserve.local import DEFAULT_STATE_DIR
from shared.engine.hardware import gpu_spec, model_shape

if TYPE_CHECKING:
    from greenserve.stack import StackSpec

__all__ = [
    "add_replay_arguments",
    "add_stack_arguments",
    "add_state_dir_argument",
    "spec_from_args",
]

# greenserve.stack is imported where it is used, not above: it loads every service's
# settings (pydantic-settings), a quarter of a second that no command's --help needs.


def _regions(text: str) -> tuple[str, ...]:
    """Comma-separated grid zones (``eia:ERCO``, ``em:KR``, or a bare code one source has
    a file for), each with carbon data and the settings it needs
    (:func:`~greenserve.stack.check_regions`; zone settings come from the settings file
    ``GREENSERVE_CONFIG`` names), refused at parse time."""
    regions = tuple(r.strip() for r in text.split(",") if r.strip())
    if not regions:
        raise argparse.ArgumentTypeError("give at least one region")
    from greenserve.stack import check_regions

    try:
        check_regions(regions, **_configured_zones())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return regions


def _configured_zones() -> dict[str, Any]:
    """The forecaster's zone settings of the settings file, for :func:`check_regions`."""
    forecaster = _configured_forecaster()
    return {"source": forecaster.get("source"), "zones": forecaster.get("zones")}


def _configured_forecaster() -> dict[str, Any]:
    """The forecaster settings the settings file (``GREENSERVE_CONFIG``) sets for zones and
    mode, which every forecaster of the stack gets."""
    from shared.config import load_settings

    return load_settings().forecaster.model_dump(
        mode="json",
        exclude_defaults=True,
        include={"source", "zones", "mode", "live_urls", "live_poll_s"},
    )


def _gpu(text: str) -> str:
    """A GPU type the simulated workers' engine model knows (aliases such as ``a100`` too),
    refused at parse time rather than by every worker process after the servers started."""
    try:
        gpu_spec(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _model(text: str) -> str:
    """A model the engine model knows, refused at parse time like :func:`_gpu`."""
    try:
        model_shape(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _models(text: str) -> tuple[str, ...]:
    """Comma-separated models, each one :func:`_model` accepts, none twice."""
    models = tuple(_model(m.strip()) for m in text.split(",") if m.strip())
    if not models:
        raise argparse.ArgumentTypeError("give at least one model")
    if len(set(models)) != len(models):
        raise argparse.ArgumentTypeError(f"a model is named twice in {text!r}")
    return models


def add_stack_arguments(
    parser: argparse.ArgumentParser, *, speedup: float = 1.0, models: str | None = None
) -> None:
    """Options describing the stack to start; ``models`` is the default of ``--models``."""
    parser.add_argument(
        "--workers", type=positive_int, default=4, help="simulated workers (default 4)"
    )
    parser.add_argument(
        "--regions",
        type=_regions,
        default="PJM,CISO,BPAT",
        help="comma-separated grid zones, one pool each: eia:<BA> (carbon/<BA>.csv), "
        "em:<ZONE> (carbon_em/<ZONE>_<year>.csv), or a code only one source has a file for; "
        "zone settings (time zone, holidays, files) in the settings file's forecaster.zones",
    )
    parser.add_argument(
        "--gpu", type=_gpu, default="A100-80GB", help="GPU type of the simulated workers"
    )
    parser.add_argument(
        "--model", type=_model, default="llama-3-8b", help="model served (one-model stack)"
    )
    parser.add_argument(
        "--models",
        type=_models,
        default=models,
        help="comma-separated models served, e.g. llama-3-8b,llama-2-13b (overrides --model): "
        "worker i serves model i mod M, each model's workers spread over the regions in turn, "
        "one pool per region and model" + (f" (default {models})" if models else ""),
    )
    parser.add_argument(
        "--tp",
        type=positive_int,
        choices=(1, 2, 4, 8),
        default=1,
        help="tensor-parallel degree per worker",
    )
    parser.add_argument(
        "--speedup", type=positive_float, default=speedup, help="model seconds per wall second"
    )
    parser.add_argument("--namespace", default="gs", help="subject/key prefix of this stack")
    parser.add_argument(
        "--gateway-port",
        type=port,
        default=0,
        help="port of the OpenAI-compatible API (0: any free)",
    )
    parser.add_argument(
        "--request-path",
        choices=("colocated", "separate"),
        default="colocated",
        help="classifier, scheduler and router in one process (default; with --secure it "
        "connects as the requestpath identity) or in three",
    )
    parser.add_argument("--nats-url", default=None, help="use this NATS instead of starting one")
    parser.add_argument("--redis-url", default=None, help="use this Redis instead of starting one")
    add_state_dir_argument(parser)


def add_state_dir_argument(parser: argparse.ArgumentParser) -> None:
    """The folder that holds a stack's state file, logs and secrets."""
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        help="folder of the stack's state file (stack.json), logs and secrets "
        "(default: %(default)s)",
    )


def spec_from_args(args: argparse.Namespace) -> StackSpec:
    """Build the stack spec from parsed options."""
    from greenserve.stack import StackSpec

    forecaster = _configured_forecaster()
    return StackSpec(
        extra={"forecaster": forecaster} if forecaster else {},
        namespace=args.namespace,
        workers=args.workers,
        regions=args.regions,
        gpu=args.gpu,
        model=args.model,
        models=args.models or (),
        tp=args.tp,
        speedup=args.speedup,
        gateway_port=args.gateway_port,
        colocate_request_path=args.request_path == "colocated",
    )


def add_replay_arguments(
    parser: argparse.ArgumentParser, *, duration_s: float | None = None
) -> None:
    """Options choosing the trace window to replay."""
    parser.add_argument(
        "--trace", default="conv", help="conv, code, or a path to an Azure-format CSV"
    )
    parser.add_argument(
        "--start", type=non_negative_float, default=0.0, help="trace offset to start at (s)"
    )
    parser.add_argument(
        "--duration", type=positive_float, default=duration_s, help="trace seconds to replay"
    )
    parser.add_argument(
        "--max-requests", type=positive_int, default=None, help="replay at most this many"
    )
    parser.add_argument(
        "--synthetic-rate",
        type=positive_float,
        default=None,
        help="replay Poisson arrivals at this rate instead",
    )
    # A CV of 0 would be a Gamma shape of 1/0.
    parser.add_argument(
        "--cv", type=positive_float, default=1.0, help="synthetic inter-arrival CV (Gamma)"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    parser.add_argument(
        "--plots", type=Path, default=None, help="write latency-CDF and power PNGs to this folder"
    )
