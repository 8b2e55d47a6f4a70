"""Options of ``greenserve bench control-plane`` (the ``run`` module beside this one runs it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from greenserve.argtypes import (
    positive_float,
    positive_floats,
    positive_int,
    positive_ints,
)
from greenserve.multihost.options import add_delays_option

__all__ = ["ENTRIES", "HELP", "NAME", "REQUEST_PATHS", "add_arguments"]

NAME = "control-plane"
HELP = "sustained req/s and p99 added latency of the control plane with instant workers"

ENTRIES = ("nats", "http")
"""``nats``: clients publish to the ingress stream; ``http``: OpenAI clients call the gateway."""
REQUEST_PATHS = ("colocated", "separate")
"""``colocated``: classifier, scheduler and router in one process
(``greenserve.local.requestpath``); ``separate``: three processes talking over NATS."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Load steps."""
    parser.add_argument(
        "--rates",
        type=positive_floats,
        default="100,200,400,800,1200,1600,2000",
        help="req/s steps, comma-separated",
    )
    parser.add_argument("--step-s", type=positive_float, default=5.0, help="seconds per step")
    parser.add_argument("--workers", type=positive_int, default=2)
    parser.add_argument(
        "--request-path",
        choices=(*REQUEST_PATHS, "both"),
        default="colocated",
        help="classifier+scheduler+router in one process (colocated), three (separate), "
        "or both alternately for an A/B comparison",
    )
    parser.add_argument(
        "--cells",
        type=positive_int,
        default=1,
        help="independent stacks (cells) on the same NATS and Redis, the workers split among "
        "them and each request sent to one at random; each cell schedules and places only on "
        "its own workers (docs/performance.md, cells)",
    )
    parser.add_argument(
        "--clients",
        type=positive_int,
        default=1,
        help="load-generator processes, each sending a random share of the requests (one "
        "client's own event loop delays the completions it stamps; docs/performance.md)",
    )
    parser.add_argument(
        "--entry",
        choices=(*ENTRIES, "both"),
        default="nats",
        help="where the load enters: the JetStream ingress (nats), the OpenAI-compatible "
        "gateway over HTTP (http: a gateway drawn at random per request, each spreading over "
        "every cell; one client, no --hops), or both alternately for an A/B comparison",
    )
    parser.add_argument(
        "--repeat", type=positive_int, default=1, help="runs per variant (request path or entry)"
    )
    parser.add_argument(
        "--hops",
        action="store_true",
        help="stamp every request at each hop and report per-hop p50/p99 (key 'hops')",
    )
    parser.add_argument(
        "--multihost",
        action="store_true",
        help="measure the separate request path on three network-namespace hosts (needs "
        "root and iproute2) with each --replicas count of classifier replicas spread over "
        "them (one deliver group), beside the same stack on one host in the same run",
    )
    parser.add_argument(
        "--replicas",
        type=positive_ints,
        default="1,2,3",
        help="with --multihost: classifier replicas to measure, comma-separated",
    )
    add_delays_option(parser)
    parser.add_argument(
        "--plots",
        type=Path,
        default=None,
        metavar="DIR",
        help="write control_plane.png there: latency and CPU per request by rate (and "
        "p99 per hop with --hops)",
    )
