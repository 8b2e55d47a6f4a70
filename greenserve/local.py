"""A local stack on this machine: embedded servers, service processes and a state file.

``greenserve up`` starts one and records it in ``<state_dir>/stack.json`` so that
``greenserve down``/``status``/``replay`` in other shells can find it; ``demo`` and the
e2e benchmark start one, use it and stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenserve.runner import ProcessGroup, start_process
from greenserve.stack import StackSpec, identity_for, stack_launches, with_settings
from proto.keys import Keys
from shared.security.local_servers import SecureServers, start_secure_servers
from shared.security.secrets import write_secret
from shared.servers import ServerProcess, free_port, start_nats, start_redis

if TYPE_CHECKING:
    from redis.asyncio import Redis

FORECASTER_CACHE_ENV = "GREENSERVE_FORECASTER__MODEL_CACHE_DIR"
"""Environment setting of ``forecaster.model_cache_dir`` (pydantic-settings' nesting)."""

__all__ = [
    "DEFAULT_STATE_DIR",
    "LocalStack",
    "StackState",
    "cell_specs",
    "load_state",
    "start_cells",
    "start_local_stack",
    "stop_state",
]

DEFAULT_STATE_DIR = Path(".greenserve")
STATE_FILE = "stack.json"


@dataclass(slots=True)
class StackState:
    """What ``greenserve up`` started (JSON in the state dir)."""

    namespace: str
    nats_url: str
    redis_url: str
    speedup: float
    origin_wall_s: float
    model: str
    workers: int
    pids: dict[str, int] = field(default_factory=dict)
    server_pids: dict[str, int] = field(default_factory=dict)
    secure: bool = False
    """Started with ``--secure``: the URLs carry the loadgen (NATS) and monitor (Redis)
    identities, so ``replay`` and ``status`` work unchanged; the file is owner-only."""
    tls_ca_file: str | None = None
    """CA of the servers' certificates when started with ``--tls``."""
    gateway_url: str | None = None
    """Base URL of the OpenAI-compatible HTTP ingress (``…/v1/completions``)."""
    cells: list[str] = field(default_factory=list)
    """State dirs of the further cells started with this one (``greenserve up --cells``), on
    this one's servers; ``stop_state`` stops them first."""
    start_ticks: dict[str, int] = field(default_factory=dict)
    """Start time of each process (``/proc/<pid>/stat``, clock ticks since boot) by PID: a
    PID that names another process now (the stack crashed, the machine rebooted) is not
    this stack's, so ``down`` does not signal it and ``up`` does not take it for running.
    Empty where ``/proc`` is not (the PIDs are then trusted) and in older state files."""

    def redis_client(
        self, *, connect_timeout_s: float = 2.0, read_timeout_s: float | None = None
    ) -> Redis:
        """A client of the stack's Redis as recorded (a ``--tls`` stack's certificate is of
        its own CA); ``read_timeout_s`` None waits for replies as long as they take."""
        from redis.asyncio import Redis  # a CLI that never reads Redis need not import it

        # Only a TLS connection takes a CA: a plain one refuses the keyword.
        tls: dict[str, Any] = {"ssl_ca_certs": self.tls_ca_file} if self.tls_ca_file else {}
        return Redis.from_url(
            self.redis_url,
            socket_connect_timeout=connect_timeout_s,
            socket_timeout=read_timeout_s,
            **tls,
        )


@dataclass(slots=True)
class LocalStack:
    """A running local stack (this process is its parent)."""

    state: StackState
    state_dir: Path
    group: ProcessGroup
    servers: list[ServerProcess]

    def save(self) -> Path:
        """Write the state file."""
        return write_secret(self.state_dir / STATE_FILE, json.dumps(asdict(self.state), indent=2))

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Wait until every worker is registered and a plan is published.

        Raises:
            RuntimeError: a service exited, or readiness did not come in time (names the logs).
        """
        asyncio.run(_wait_ready(self, timeout_s))

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop services (graceful drain), then the servers we started."""
        self.group.stop(timeout_s)
        for server in self.servers:
            server.stop()
        with contextlib.suppress(FileNotFoundError):
            (self.state_dir / STATE_FILE).unlink()


async def _wait_ready(stack: LocalStack, timeout_s: float) -> None:
    from redis.exceptions import RedisError

    keys = Keys(stack.state.namespace)
    redis = stack.state.redis_client(read_timeout_s=2.0)
    deadline = time.monotonic() + timeout_s
    unreachable = ""
    try:
        while time.monotonic() < deadline:
            dead = stack.group.dead()
            if dead:
                logs = ", ".join(str(stack.state_dir / "logs" / f"{n}.log") for n in dead)
                raise RuntimeError(
                    f"services exited during start-up: {', '.join(dead)}; see {logs}"
                )
            gone = [s for s in stack.servers if s.proc.poll() is not None]
            if gone:
                names = ", ".join(s.name for s in gone)
                raise RuntimeError(
                    f"servers exited during start-up: {names}; see the logs in "
                    f"{', '.join(str(s.workdir) for s in gone)}"
                )
            try:
                workers = [k async for k in redis.scan_iter(match=keys.worker_pattern)]
                if len(workers) >= stack.state.workers and await redis.exists(keys.plan):
                    return
                unreachable = ""
            except (RedisError, OSError) as exc:
                # Not ready yet, as far as ``up`` can tell: say why if it stays so, rather
                # than end ``up`` with a traceback that leaves the stack running.
                unreachable = f"; redis unreachable: {exc}"
            await asyncio.sleep(0.2)
    finally:
        await redis.aclose()
    raise RuntimeError(
        f"stack not ready within {timeout_s} s{unreachable}; logs are in {stack.state_dir / 'logs'}"
    )


def start_local_stack(
    spec: StackSpec,
    state_dir: Path = DEFAULT_STATE_DIR,
    *,
    nats_url: str | None = None,
    redis_url: str | None = None,
    secure: bool = False,
    tls: bool = False,
    origin_wall_s: float | None = None,
) -> LocalStack:
    """Start servers (unless URLs are given) and every service process of ``spec``.

    ``secure`` starts both servers with per-service users and permissions and gives each
    process its own identity (``shared.security.local_servers``); ``tls`` adds a local CA.
    ``origin_wall_s`` (default: now) is the wall time of model time's origin; cells share
    their first cell's, so their model clocks agree.

    Raises:
        ValueError: ``secure`` with server URLs (it must configure the servers itself), or
            ``tls`` without ``secure``.
    """
    if secure and (nats_url is not None or redis_url is not None):
        raise ValueError("--secure starts its own NATS and Redis; drop --nats-url/--redis-url")
    if tls and not secure:
        raise ValueError("--tls needs --secure")
    state_dir = state_dir.resolve()
    _refuse_running_stack(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    servers: list[ServerProcess] = []
    secured: SecureServers | None = None
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        if secure:
            identities = [identity_for(launch) for launch in stack_launches(spec)]
            secured = start_secure_servers(identities, spec.namespace, state_dir, tls=tls)
            servers += secured.servers
            nats_url, redis_url = secured.servers[0].url, secured.servers[1].url
        if nats_url is None:
            # A stack we start owns its server: begin with an empty JetStream store, so no
            # request of an earlier run is redelivered to a client that is long gone.
            shutil.rmtree(state_dir / "nats", ignore_errors=True)
            servers.append(start_nats(state_dir / "nats"))
            nats_url = servers[-1].url
        if redis_url is None:
            servers.append(start_redis(state_dir / "redis"))
            redis_url = servers[-1].url
        origin = time.time() if origin_wall_s is None else origin_wall_s
        gateway_port = spec.gateway_port or free_port()
        # Fitted forecasters outlive a stack (unlike its queues): a restart skips the fit. A
        # cache named in the environment (shared by many stacks, as in the test suite) wins.
        extra = dict(spec.extra)
        forecaster = dict(extra.get("forecaster", {}))
        if not os.environ.get(FORECASTER_CACHE_ENV):
            forecaster.setdefault("model_cache_dir", str(_forecaster_cache(state_dir)))
        extra["forecaster"] = forecaster
        spec = _replace(
            spec,
            extra=extra,
            nats_url=nats_url,
            redis_url=redis_url,
            origin_wall_s=origin,
            gateway_port=gateway_port,
        )
        launches = stack_launches(spec)
        if secured is not None:
            launches = with_settings(launches, secured.overrides)
        for launch in launches:
            procs[launch.name] = start_process(launch, state_dir)
    except BaseException:
        # The services started so far run in their own sessions and no state file names
        # them yet: nothing but this would ever stop them.
        ProcessGroup(procs).stop(timeout_s=5.0)
        for server in servers:
            server.stop()
        raise
    pids = {name: proc.pid for name, proc in procs.items()}
    server_pids = {s.name: s.proc.pid for s in servers}
    ticks = {str(pid): _start_ticks(pid) for pid in [*pids.values(), *server_pids.values()]}
    state = StackState(
        namespace=spec.namespace,
        nats_url=secured.tool_nats_url if secured else nats_url,
        redis_url=secured.tool_redis_url if secured else redis_url,
        speedup=spec.speedup,
        origin_wall_s=origin,
        model=spec.model,
        workers=spec.workers,
        pids=pids,
        server_pids=server_pids,
        start_ticks={pid: tick for pid, tick in ticks.items() if tick is not None},
        secure=secure,
        tls_ca_file=str(secured.tls.ca_file) if secured and secured.tls else None,
        gateway_url=f"http://127.0.0.1:{spec.gateway_port}",
    )
    stack = LocalStack(state, state_dir, ProcessGroup(procs), servers)
    stack.save()
    return stack


def _forecaster_cache(state_dir: Path) -> Path:
    """Where a stack started in ``state_dir`` keeps its fitted forecasters (its cells too)."""
    return state_dir / "cache" / "forecaster"


def _replace(spec: StackSpec, **changes: Any) -> StackSpec:
    from dataclasses import replace

    return replace(spec, **changes)


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
        _replace(
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
    cells share no server, and each gateway serves its own cell only.

    Raises:
        ValueError: as :func:`cell_specs` and :func:`start_local_stack`.
        RuntimeError: a cell did not come up; the cells started are stopped again.
    """
    state_dir = state_dir.resolve()
    forecaster = dict(spec.extra.get("forecaster", {}))
    forecaster.setdefault("model_cache_dir", str(_forecaster_cache(state_dir)))
    specs = cell_specs(
        _replace(spec, extra={**spec.extra, "forecaster": forecaster}), cells, front_door=not secure
    )
    stacks: list[LocalStack] = []
    try:
        first = start_local_stack(
            specs[0], state_dir, nats_url=nats_url, redis_url=redis_url, secure=secure, tls=tls
        )
        stacks.append(first)
        if cells > 1:
            first.wait_ready()
            if settle is not None:
                settle(first)
        # Shared servers, unless each secured cell starts its own.
        shared: dict[str, str | None] = (
            {} if secure else {"nats_url": first.state.nats_url, "redis_url": first.state.redis_url}
        )
        for i, cell in enumerate(specs[1:], start=1):
            stacks.append(
                start_local_stack(
                    cell,
                    state_dir / "cells" / str(i),
                    secure=secure,
                    tls=tls,
                    origin_wall_s=first.state.origin_wall_s,
                    **shared,
                )
            )
        first.state.cells = [str(stack.state_dir) for stack in stacks[1:]]
        first.save()
    except BaseException:
        for stack in reversed(stacks):
            stack.stop()
        raise
    return stacks


def _refuse_running_stack(state_dir: Path) -> None:
    """Refuse to start over a stack recorded in ``state_dir`` that still runs.

    Starting anyway would overwrite its state file, so ``greenserve down`` could no longer
    find it, and wipe the JetStream store under its NATS. A state file whose processes have
    all ended (a crash, a reboot) is stale and is replaced.

    Raises:
        RuntimeError: a process of the recorded stack is alive.
    """
    try:
        state = load_state(state_dir)
    except FileNotFoundError:
        return
    except (ValueError, TypeError):
        return  # unreadable: it cannot name anything to stop either
    running = sorted(
        name for name, pid in {**state.pids, **state.server_pids}.items() if alive(pid, state)
    )
    if running:
        raise RuntimeError(
            f"a stack recorded in {state_dir / STATE_FILE} is still running "
            f"({', '.join(running)}); stop it with `greenserve down --state-dir {state_dir}` "
            "or choose another --state-dir"
        )


def load_state(state_dir: Path = DEFAULT_STATE_DIR) -> StackState:
    """Read the state file of a stack started by ``greenserve up``.

    Raises:
        FileNotFoundError: no stack is recorded there.
    """
    path = state_dir / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"no running stack recorded in {path}; start one with `greenserve up`"
        )
    return StackState(**json.loads(path.read_text()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # ``kill(pid, 0)`` succeeds on a zombie: a process that ended but that its parent (the
    # ``greenserve up --foreground`` of another shell, say) has not reaped yet.
    return not _zombie(pid)


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after ``pid (comm)``; empty without ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    # comm may hold spaces and parentheses: the fields start after the last ``)``.
    return stat.rpartition(")")[2].split()


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has ended and waits to be reaped (False where ``/proc`` is not)."""
    return _stat(pid)[:1] == ["Z"]


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (field 22 of ``/proc/<pid>/stat``)."""
    fields = _stat(pid)
    return int(fields[19]) if len(fields) > 19 else None


def _signal(pid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to ``pid``; False when it had ended already (it may end at any moment)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def stop_state(state_dir: Path = DEFAULT_STATE_DIR, timeout_s: float = 15.0) -> list[str]:
    """Stop a stack recorded in the state dir (from another process); return what was stopped."""
    state = load_state(state_dir)
    stopped: list[str] = []
    for cell in state.cells:  # on this stack's servers: stop them before the servers
        if (Path(cell) / STATE_FILE).exists():
            stopped += stop_state(Path(cell), timeout_s)
    for group in (state.pids, state.server_pids):
        ours = {name: pid for name, pid in group.items() if alive(pid, state)}
        for name, pid in ours.items():
            if _signal(pid, signal.SIGTERM):
                stopped.append(name)
        deadline = time.monotonic() + timeout_s
        for pid in ours.values():
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            if _alive(pid):
                _signal(pid, signal.SIGKILL)
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    return stopped


def alive(pid: int, state: StackState | None = None) -> bool:
    """Whether a process exists (and, given the ``state`` that recorded it, is still the
    process it recorded, not a later one that was given the same PID)."""
    if not _alive(pid):
        return False
    recorded = state.start_ticks.get(str(pid)) if state is not None else None
    return recorded is None or _start_ticks(pid) in (None, recorded)
