"""``python -m services.clockd [--socket PATH]``: run the clock agent of this node.

Run it as root (or with CAP_SYS_ADMIN), one per node; the serving processes send it clock
requests over the socket (``docs/gpu-clocks.md``). Exit status 2: bad options or no NVML
(``nvidia-ml-py`` missing, or no NVIDIA driver), with one line saying which.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys
from pathlib import Path
from typing import cast

from services.clockd.agent import run_agent
from shared.config import load_settings
from shared.gpu.clock_lock import ClockLocker, ClockModule, ClockRefusedError
from shared.logs import setup_logging

logger = logging.getLogger("services.clockd")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m services.clockd",
        description="Lock GPU SM clocks through NVML for the serving processes of this node.",
    )
    parser.add_argument(
        "--socket",
        type=Path,
        default=None,
        help="Unix socket to listen on (default: worker.clock_agent_socket of the settings, "
        "as under greenserve up)",
    )
    parser.add_argument(
        "--socket-group",
        default=None,
        help="group given the socket (mode 0660): the serving processes' group",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="serve Prometheus /metrics on 127.0.0.1:PORT (0: off; without --socket, "
        "telemetry.metrics_port of the settings)",
    )
    parser.add_argument(
        "--nvml-module",
        default="pynvml",
        help="module with pynvml's functions (tests pass a fake GPU's; default pynvml)",
    )
    parser.add_argument("--log-level", default="INFO")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the agent until a signal; return the exit status."""
    args = _parser().parse_args(argv)
    setup_logging("clockd", args.log_level)
    if args.socket is None:  # the workers' setting: one file names the socket for both sides
        settings = load_settings()
        args.socket = Path(settings.worker.clock_agent_socket)
        args.metrics_port = args.metrics_port or settings.telemetry.metrics_port or 0
    problem = ""
    try:
        nvml = cast(ClockModule, importlib.import_module(args.nvml_module))
        locker = ClockLocker(nvml)
    except ImportError as exc:
        problem = (
            f"cannot import {args.nvml_module} ({exc}): install nvidia-ml-py "
            "(the 'gpu' extra) on GPU nodes"
        )
    except ClockRefusedError as exc:
        problem = f"{exc}; is this a node with NVIDIA GPUs and their driver?"
    if problem:
        logger.error("%s", problem)
        return 2
    try:
        asyncio.run(
            run_agent(locker, args.socket, group=args.socket_group, metrics_port=args.metrics_port)
        )
    except (RuntimeError, KeyError, OSError) as exc:  # socket taken, unknown group, ...
        problem = f"clock agent cannot serve {args.socket}: {exc}"
    if problem:
        logger.error("%s", problem)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
