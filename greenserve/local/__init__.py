"""A local stack on this machine: embedded servers, service processes and a state file.

``greenserve up`` starts one and records it in ``<state_dir>/stack.json`` so that
``greenserve down``/``status``/``replay`` in other shells can find it; ``demo`` and the
e2e benchmark start one, use it and stop it.

- :mod:`greenserve.local.state`: the state file (:class:`StackState`, :func:`load_state`);
- :mod:`greenserve.local.servers`: the NATS and Redis a stack runs on;
- :mod:`greenserve.local.startup`: :func:`start_local_stack` and :class:`LocalStack`, a
  stack this process started;
- :mod:`greenserve.local.cells`: a stack as several cells on shared servers;
- :mod:`greenserve.local.processes`: whether a recorded process still runs, and
  :func:`stop_state`, which stops a recorded stack from another shell.

Each name is imported from its module on first use (PEP 562): ``greenserve down`` and every
command's ``--help`` need only the light state file, while starting a stack imports NATS,
Redis, aiohttp and the service settings, most of a second of the CLI's start otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from greenserve.local.cells import cell_specs, start_cells
    from greenserve.local.processes import alive, stop_state
    from greenserve.local.startup import FORECASTER_CACHE_ENV, LocalStack, start_local_stack
    from greenserve.local.state import DEFAULT_STATE_DIR, STATE_FILE, StackState, load_state

__all__ = [
    "DEFAULT_STATE_DIR",
    "FORECASTER_CACHE_ENV",
    "STATE_FILE",
    "LocalStack",
    "StackState",
    "alive",
    "cell_specs",
    "load_state",
    "start_cells",
    "start_local_stack",
    "stop_state",
]

_MODULE_OF = {
    "cell_specs": "cells",
    "start_cells": "cells",
    "alive": "processes",
    "stop_state": "processes",
    "FORECASTER_CACHE_ENV": "startup",
    "LocalStack": "startup",
    "start_local_stack": "startup",
    "DEFAULT_STATE_DIR": "state",
    "STATE_FILE": "state",
    "StackState": "state",
    "load_state": "state",
}

__getattr__ = lazy_getattr(__name__, _MODULE_OF)
