"""Options of ``greenserve bench fuzz`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse

from greenserve.argtypes import positive_float, positive_int, seed

__all__ = ["HELP", "NAME", "add_arguments"]

NAME = "fuzz"
HELP = "hypothesis fuzzing of every decoder, the JetStream ingress and the HTTP gateway"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Case counts, seed and timeouts."""
    parser.add_argument("--decoder-cases", type=positive_int, default=450, help="per message type")
    parser.add_argument("--ingress-cases", type=positive_int, default=600)
    parser.add_argument(
        "--cancel-cases", type=positive_int, default=600, help="CancelRequests on cancel.client.*"
    )
    parser.add_argument("--http-cases", type=positive_int, default=600)
    parser.add_argument(
        "--forecast-query-cases",
        type=positive_int,
        default=300,
        help="query strings for GET /emissions/forecasts/current",
    )
    parser.add_argument("--seed", type=seed, default=0)
    parser.add_argument("--reply-timeout-s", type=positive_float, default=15.0)
    parser.add_argument(
        "--speedup", type=positive_float, default=200.0, help="simulated GPU speed-up"
    )
