"""Run a stack's services: as child processes (``greenserve up``) or in one event loop (tests).

Both use the same settings per service (:func:`greenserve.stack.stack_launches`); a process
reads its settings from a YAML file named by ``GREENSERVE_CONFIG``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from greenserve.stack import ServiceLaunch
from shared.config import CONFIG_FILE_ENV
from shared.lifecycle import ServiceContext, service_context

__all__ = ["InProcessService", "ProcessGroup", "run_in_process", "start_process", "write_config"]

STOP_TIMEOUT_S = 15.0
"""How long ``run_in_process`` waits for its services to drain before it cancels them."""


def write_config(launch: ServiceLaunch, folder: Path) -> Path:
    """Write one service's settings as YAML; return the file."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{launch.name}.yaml"
    data = json.loads(launch.settings.model_dump_json(exclude_none=True))
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def start_process(
    launch: ServiceLaunch, folder: Path, exec_prefix: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """Start ``python -m <module>`` with its settings file; output goes to ``<name>.log``.

    ``exec_prefix`` runs it through another command: ``ip netns exec <ns>`` puts it on a
    host of the multi-host harness (``greenserve.multihost``), which execs the service in
    place, so the process's pid is the service's.
    """
    config = write_config(launch, folder / "config")
    logs = folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, CONFIG_FILE_ENV: str(config)}
    log = (logs / f"{launch.name}.log").open("ab")
    return subprocess.Popen(
        [*exec_prefix, sys.executable, "-m", launch.module],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C on `greenserve up` is handled by us, not each child
    )


@dataclass(slots=True)
class ProcessGroup:
    """Child processes of a stack, by name."""

    procs: dict[str, subprocess.Popen[bytes]]

    def stop(self, timeout_s: float = 10.0, names: Sequence[str] | None = None) -> None:
        """SIGTERM (graceful drain), then SIGKILL what is left after ``timeout_s``."""
        chosen = [self.procs[n] for n in (names or list(self.procs))]
        for proc in chosen:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in chosen:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def dead(self) -> list[str]:
        """Names of processes that have exited."""
        return [name for name, proc in self.procs.items() if proc.poll() is not None]


@dataclass(slots=True)
class InProcessService:
    """A service running as a task in the current event loop."""

    launch: ServiceLaunch
    stop: asyncio.Event
    task: asyncio.Task[None]


async def _run_one(
    launch: ServiceLaunch, ready: asyncio.Event, holder: list[ServiceContext]
) -> None:
    module = importlib.import_module(f"{launch.module}.service")
    serve: Callable[[ServiceContext], Awaitable[None]] = module.serve
    async with service_context(launch.name, launch.settings) as ctx:
        holder.append(ctx)
        ready.set()
        await serve(ctx)


@contextlib.asynccontextmanager
async def run_in_process(
    launches: Sequence[ServiceLaunch],
) -> AsyncIterator[dict[str, InProcessService]]:
    """Run services as tasks; on exit stop them all and wait for their drain.

    A service that failed is re-raised on exit: alone as itself, several together as one
    ``ExceptionGroup`` in launch order. If the block itself raised (or a start-up failed),
    that exception goes on, with a note naming each service that also failed, so neither
    hides the other.

    Raises:
        ValueError: two launches share a name (one would never be stopped); two stacks
            run as two calls.
    """
    names = [launch.name for launch in launches]
    if len(set(names)) != len(names):
        raise ValueError(f"launch names repeat in {names}; run each stack in its own call")
    running: dict[str, InProcessService] = {}
    raised: BaseException | None = None
    try:
        for launch in launches:
            ready = asyncio.Event()
            holder: list[ServiceContext] = []
            task = asyncio.create_task(_run_one(launch, ready, holder), name=launch.name)
            waiter = asyncio.create_task(ready.wait())
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if task.done():
                task.result()  # raises the start-up error
            running[launch.name] = InProcessService(launch, holder[0].stop, task)
        yield running
    except BaseException as exc:
        raised = exc
        raise
    finally:
        failures = await _stop_all(running)
        if raised is not None:
            for name, error in failures:
                raised.add_note(f"service {name} also failed: {error!r}")
        elif len(failures) == 1:
            raise failures[0][1]
        elif failures:
            raise BaseExceptionGroup(
                f"{len(failures)} services failed: {', '.join(n for n, _ in failures)}",
                [error for _, error in failures],
            )


async def _stop_all(running: dict[str, InProcessService]) -> list[tuple[str, BaseException]]:
    """Ask every service to stop, cancel those that outlast the wait; return the failures."""
    for service in running.values():
        service.stop.set()
    tasks = [s.task for s in running.values()]
    if not tasks:
        return []
    _, pending = await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
    for task in pending:
        task.cancel()
    if pending:
        # Wait for the cancellations to run (the contexts close their NATS and Redis
        # connections); bounded, as a task may swallow its cancellation.
        await asyncio.wait(pending, timeout=STOP_TIMEOUT_S)
    return [
        (name, error)
        for name, service in running.items()
        if service.task.done()
        and not service.task.cancelled()
        and (error := service.task.exception()) is not None
    ]
