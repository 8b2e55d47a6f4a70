"""Options of ``greenserve bench overload`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse

from greenserve.argtypes import positive_float, positive_int, seed

__all__ = ["HELP", "NAME", "add_arguments"]

NAME = "overload"
HELP = (
    "offer a multiple of the stack's measured capacity over HTTP and NATS: every request "
    "answered within a bound, gateway memory flat, admitted p99 within its SLO"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """How much overload, for how long, on which stack, judged against which bounds."""
    parser.add_argument(
        "--factor", type=positive_float, default=10.0, help="offered load / capacity (10)"
    )
    parser.add_argument(
        "--duration-s",
        type=positive_float,
        default=60.0,
        help="wall seconds of overload per entry (60; a CI run uses less)",
    )
    parser.add_argument(
        "--entries", default="http,nats", help="comma-separated: http (the gateway), nats"
    )
    parser.add_argument("--workers", type=positive_int, default=2)
    parser.add_argument(
        "--max-num-seqs", type=positive_int, default=8, help="batch slots per worker"
    )
    parser.add_argument(
        "--speedup",
        type=positive_float,
        default=1.0,
        help="model seconds per wall second (1: real time, so an SLO is seconds of wall)",
    )
    parser.add_argument("--prompt-tokens", type=positive_int, default=512)
    parser.add_argument("--output-tokens", type=positive_int, default=256)
    parser.add_argument(
        "--calibrate-s",
        type=positive_float,
        default=20.0,
        help="wall seconds of the closed-loop run that measures capacity",
    )
    parser.add_argument(
        "--max-queue-wait-s",
        type=positive_float,
        default=1.0,
        help="the stack's scheduler.max_queue_wait_s: its ceiling, sized to the SLO",
    )
    parser.add_argument(
        "--answer-bound-s",
        type=positive_float,
        default=30.0,
        help="every request must be answered (completed, 429 or an error) within this",
    )
    parser.add_argument(
        "--rss-growth-mb",
        type=positive_float,
        default=50.0,
        help="most the gateway's resident memory may grow over the HTTP overload",
    )
    parser.add_argument("--seed", type=seed, default=0, help="of the Poisson arrivals")
