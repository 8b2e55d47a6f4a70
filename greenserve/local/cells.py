"""A local stack split into cells: independent stacks (namespaces) on shared servers.

``greenserve up --cells`` and the control-plane benchmark start them; see
``docs/architecture.md`` (cells) for why a cell is a whole stack.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from greenserve.local.startup import LocalStack, forecaster_cache, start_local_stack
from greenserve.local.supervisor import SupervisorSettings
from greenserve.stack import StackSpec

__all__ = ["cell_specs", "start_cells"]


def cell_specs(spec: StackSpec, cells: int, *, front_door: bool = True) -> list[StackSpec]:
    """``spec`` split into ``cells`` stacks: namespaces ``ns``, ``ns1`` …, the workers dealt
    out (the first cells take the remainder), gateway ports counted up from a fixed one,
    and, with ``front_door`` (cells on shared servers), every cell's gateway told all the
    cells' namespaces (``gateway.cells``), so any one of their addresses spreads requests
    over all of them.

    Raises:
        ValueError: fewer workers than cells, or no cell.
    """
    if cells < 1:
        raise ValueError("a stack has at least one cell")
    if cells > spec.workers:
        raise ValueError(f"{cells} cells need at least as many workers, not {spec.workers}")
    namespaces = [spec.namespace if i == 0 else f"{spec.namespace}{i}" for i in range(cells)]
    extra = spec.extra
    if cells > 1 and front_door:  # every cell's gateway is a front door to all of them
        extra = {**extra, "gateway": {**extra.get("gateway", {}), "cells": namespaces}}
    return [
        replace(
            spec,
            namespace=namespace,
            workers=spec.workers // cells + (1 if i < spec.workers % cells else 0),
            gateway_port=spec.gateway_port + i if spec.gateway_port else 0,
            extra=extra,
        )
        for i, namespace in enumerate(namespaces)
    ]


def start_cells(
    spec: StackSpec,
    state_dir: Path,
    cells: int,
    *,
    nats_url: str | None = None,
    redis_url: str | None = None,
    settle: Callable[[LocalStack], object] | None = None,
    secure: bool = False,
    tls: bool = False,
    supervise: SupervisorSettings | None = None,
) -> list[LocalStack]:
    """Start ``spec`` as ``cells`` independent stacks on one NATS and one Redis.

    The first cell starts in ``state_dir`` (and the servers, unless URLs are given) and is
    waited for (``settle`` too, if given), so its forecaster has fitted before the others
    start in ``state_dir/cells/<i>`` and load its fits from the shared cache. Every cell
    keeps its own namespace: ingress stream, queues and Redis keys, so each is exactly a
    stack as far as durability goes (``docs/architecture.md``, cells). The first cell's
    state file lists the others, so ``greenserve down`` stops them all.

    ``secure`` (and ``tls``) gives every cell its own secured NATS and Redis instead: a
    secured server holds the users and permissions of one stack's processes, so secured
    cells share no server, and each gateway serves its own cell only. ``supervise``
    gives every cell its own supervisor.

    Raises:
        ValueError: as :func:`cell_specs` and :func:`start_local_stack`.
        RuntimeError: a cell did not come up; the cells started are stopped again.
    """
    state_dir = state_dir.resolve()
    forecaster = dict(spec.extra.get("forecaster", {}))
    forecaster.setdefault("model_cache_dir", str(forecaster_cache(state_dir)))
    specs = cell_specs(
        replace(spec, extra={**spec.extra, "forecaster": forecaster}), cells, front_door=not secure
    )
    stacks: list[LocalStack] = []
    try:
        first = start_local_stack(
            specs[0],
            state_dir,
            nats_url=nats_url,
            redis_url=redis_url,
            secure=secure,
            tls=tls,
            supervise=supervise,
        )
        stacks.append(first)
        if cells > 1:
            first.wait_ready()
            if settle is not None:
                settle(first)
        # Shared servers, unless each secured cell starts its own.
        for i, cell in enumerate(specs[1:], start=1):
            stacks.append(
                start_local_stack(
                    cell,
                    state_dir / "cells" / str(i),
                    secure=secure,
                    tls=tls,
                    origin_wall_s=first.state.origin_wall_s,
                    supervise=supervise,
                    nats_url=None if secure else first.state.nats_url,
                    redis_url=None if secure else first.state.redis_url,
                )
            )
        first.state.cells = [str(stack.state_dir) for stack in stacks[1:]]
        first.save()
    except BaseException:
        for stack in reversed(stacks):
            stack.stop()
        raise
    return stacks
