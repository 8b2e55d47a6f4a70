"""Starting a local stack: its servers, then every service process, then its state file.

:class:`LocalStack` is a stack this process started (and is the parent of): it waits for
the stack to be ready and stops it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from greenserve.local.metrics_targets import metrics_urls, with_metrics_ports, write_targets
from greenserve.local.processes import alive, start_ticks, stop_pids, stop_supervisor
from greenserve.local.server_commands import record_server
from greenserve.local.servers import StackServers, start_servers
from greenserve.local.state import DEFAULT_STATE_DIR, STATE_FILE, StackState, load_state
from greenserve.local.supervisor import SupervisorSettings, save_state, start_supervisor
from greenserve.runner import ProcessGroup, start_process
from greenserve.stack import StackSpec, stack_launches, with_settings
from proto.keys import Keys
from shared.servers import ServerProcess, free_port

if TYPE_CHECKING:
    from shared.security.local_servers import SecureServers

__all__ = [
    "FORECASTER_CACHE_ENV",
    "LocalStack",
    "check_failover_options",
    "forecaster_cache",
    "start_local_stack",
]

FORECASTER_CACHE_ENV = "GREENSERVE_FORECASTER__MODEL_CACHE_DIR"
"""Environment setting of ``forecaster.model_cache_dir`` (pydantic-settings' nesting)."""


@dataclass(slots=True)
class LocalStack:
    """A running local stack (this process is its parent)."""

    state: StackState
    state_dir: Path
    group: ProcessGroup
    servers: list[ServerProcess]

    def save(self) -> Path:
        """Write the state file (whole or not at all: the supervisor reads it meanwhile)."""
        save_state(self.state_dir, self.state)
        return self.state_dir / STATE_FILE

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Wait until every worker is registered and a plan is published.

        Raises:
            RuntimeError: a service exited, or readiness did not come in time (names the logs).
        """
        asyncio.run(_wait_ready(self, timeout_s))

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the supervisor, services (graceful drain), then the servers we started."""
        restarted: dict[str, int] = {}
        if stop_supervisor(self.state, timeout_s):
            restarted = self._stop_restarted(timeout_s)
        self.group.stop(timeout_s)
        for server in reversed(self.servers):  # Sentinels before the Redis they watch
            if server.name in restarted:
                stop_pids({server.name: restarted[server.name]}, self.state, timeout_s)
            else:
                server.stop()
        with contextlib.suppress(FileNotFoundError):
            (self.state_dir / STATE_FILE).unlink()

    def _stop_restarted(self, timeout_s: float) -> dict[str, int]:
        """Stop the services the supervisor started again (this process is not their
        parent, so they are not in ``group``); return the servers it started again, by
        name, for :meth:`stop` to stop in their turn."""
        try:
            state = load_state(self.state_dir)
        except (FileNotFoundError, ValueError, TypeError):
            return {}
        ours = {proc.pid for proc in self.group.procs.values()}
        restarted = {name: pid for name, pid in state.pids.items() if pid not in ours}
        stop_pids(restarted, state, timeout_s)
        self.state = state
        first = {server.proc.pid for server in self.servers}
        return {name: pid for name, pid in state.server_pids.items() if pid not in first}


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
                if (
                    len(workers) >= stack.state.workers
                    and await redis.exists(keys.plan)
                    and await _serving_metrics(stack.state.metrics)
                ):
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


async def _serving_metrics(urls: dict[str, str]) -> bool:
    """Whether every process listens on its metrics port: a stack that says it is ready
    can be scraped whole (a slow importer, the dvfs agent, binds its port last)."""
    for url in urls.values():
        parts = urlsplit(url)
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(parts.hostname, parts.port), 1.0
            )
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return True


def start_local_stack(
    spec: StackSpec,
    state_dir: Path = DEFAULT_STATE_DIR,
    *,
    nats_url: str | None = None,
    redis_url: str | None = None,
    secure: bool = False,
    tls: bool = False,
    origin_wall_s: float | None = None,
    supervise: SupervisorSettings | None = None,
    nats_cluster: int = 1,
    redis_sentinel: bool = False,
) -> LocalStack:
    """Start servers (unless URLs are given) and every service process of ``spec``.

    ``secure`` starts both servers with per-service users and permissions and gives each
    process its own identity (``shared.security.local_servers``); ``tls`` adds a local CA.
    ``origin_wall_s`` (default: now) is the wall time of model time's origin; cells share
    their first cell's, so their model clocks agree. ``supervise`` starts a supervisor
    (:mod:`greenserve.local.supervisor`) that restarts a service or a server started here
    that exits; the fault bench and the tests that kill processes on purpose leave it
    ``None``.

    ``nats_cluster`` > 1 starts that many NATS nodes with routes (every JetStream resource
    on min(3, nodes) of them); ``redis_sentinel`` a Redis primary, replica and three
    Sentinels that the services follow through a failover.

    Raises:
        ValueError: ``secure`` with server URLs (it must configure the servers itself),
            ``tls`` without ``secure``, or a cluster or Sentinels with ``secure`` or with
            the URL of the server they would replace.
    """
    if secure and (nats_url is not None or redis_url is not None):
        raise ValueError("--secure starts its own NATS and Redis; drop --nats-url/--redis-url")
    if tls and not secure:
        raise ValueError("--tls needs --secure")
    check_failover_options(
        nats_cluster, redis_sentinel, secure=secure, nats_url=nats_url, redis_url=redis_url
    )
    state_dir = state_dir.resolve()
    _refuse_running_stack(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    servers: StackServers | None = None
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        servers = start_servers(
            spec,
            state_dir,
            nats_url=nats_url,
            redis_url=redis_url,
            secure=secure,
            tls=tls,
            nats_cluster=nats_cluster,
            redis_sentinel=redis_sentinel,
        )
        origin = time.time() if origin_wall_s is None else origin_wall_s
        gateway_port = spec.gateway_port or free_port()
        # Fitted forecasters outlive a stack (unlike its queues): a restart skips the fit. A
        # cache named in the environment (shared by many stacks, as in the test suite) wins.
        extra = dict(spec.extra)
        forecaster = dict(extra.get("forecaster", {}))
        if not os.environ.get(FORECASTER_CACHE_ENV):
            forecaster.setdefault("model_cache_dir", str(forecaster_cache(state_dir)))
        extra["forecaster"] = forecaster
        spec = replace(
            spec,
            extra=extra,
            nats_url=servers.nats_url,
            redis_url=servers.redis_url,
            nats_replicas=servers.nats_replicas,
            redis_sentinels=servers.redis_sentinels,
            redis_master_name=servers.redis_master_name,
            origin_wall_s=origin,
            gateway_port=gateway_port,
        )
        launches = stack_launches(spec)
        if servers.secured is not None:
            launches = with_settings(launches, servers.secured.overrides)
        launches = with_metrics_ports(launches)
        for launch in launches:
            procs[launch.name] = start_process(launch, state_dir)
    except BaseException:
        # The services started so far run in their own sessions and no state file names
        # them yet: nothing but this would ever stop them.
        ProcessGroup(procs).stop(timeout_s=5.0)
        if servers is not None:
            servers.stop()
        raise
    pids = {name: proc.pid for name, proc in procs.items()}
    server_pids = {s.name: s.proc.pid for s in servers.started}
    ticks = {str(pid): start_ticks(pid) for pid in [*pids.values(), *server_pids.values()]}
    secured = servers.secured
    state = StackState(
        namespace=spec.namespace,
        nats_url=servers.tool_nats_url,
        redis_url=servers.tool_redis_url,
        nats_replicas=servers.nats_replicas,
        redis_sentinels=list(servers.redis_sentinels),
        redis_master_name=servers.redis_master_name,
        speedup=spec.speedup,
        origin_wall_s=origin,
        model=spec.model,
        models=list(spec.models),
        workers=spec.workers,
        pids=pids,
        server_pids=server_pids,
        start_ticks={pid: tick for pid, tick in ticks.items() if tick is not None},
        secure=secure,
        tls_ca_file=str(secured.tls.ca_file) if secured and secured.tls else None,
        admin_nats_password_file=_admin_file(secured, "nats"),
        admin_redis_password_file=_admin_file(secured, "redis"),
        gateway_url=f"http://127.0.0.1:{spec.gateway_port}",
        modules={launch.name: launch.module for launch in launches},
        server_commands={
            s.name: record_server(s, state_dir, Path.cwd()) for s in servers.started if s.args
        },
        metrics=metrics_urls(launches),
        metrics_targets_file=str(write_targets(state_dir, launches, spec.namespace)),
    )
    stack = LocalStack(state, state_dir, ProcessGroup(procs), servers.started)
    stack.save()
    if supervise is not None:
        # Started once the state file names every service: that file is what it watches.
        stack.state.supervisor_pid = start_supervisor(state_dir, supervise).pid
        stack.state.start_ticks.update(_ticks_of(stack.state.supervisor_pid))
        stack.save()
    return stack


def check_failover_options(
    nats_cluster: int,
    redis_sentinel: bool,
    *,
    secure: bool = False,
    nats_url: str | None = None,
    redis_url: str | None = None,
) -> None:
    """Refuse the combinations a cluster or Sentinels cannot run with (one message each).

    Raises:
        ValueError: what is wrong and what to drop.
    """
    if nats_cluster < 1:
        raise ValueError(f"--nats-cluster is a number of nodes (at least 1), not {nats_cluster}")
    if secure and (nats_cluster > 1 or redis_sentinel):
        raise ValueError("--nats-cluster and --redis-sentinel run without --secure for now")
    if nats_cluster > 1 and nats_url is not None:
        raise ValueError("--nats-cluster starts its own NATS nodes; drop --nats-url")
    if redis_sentinel and redis_url is not None:
        raise ValueError("--redis-sentinel starts its own Redis set; drop --redis-url")


def _admin_file(secured: SecureServers | None, server: str) -> str | None:
    """Where a secured stack's ``admin`` password for ``server`` (nats, redis) is."""
    if secured is None or secured.admin_files is None:
        return None
    files = secured.admin_files
    return str(files.nats_password_file if server == "nats" else files.redis_password_file)


def _ticks_of(pid: int) -> dict[str, int]:
    ticks = start_ticks(pid)
    return {} if ticks is None else {str(pid): ticks}


def forecaster_cache(state_dir: Path) -> Path:
    """Where a stack started in ``state_dir`` keeps its fitted forecasters (its cells too)."""
    return state_dir / "cache" / "forecaster"


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
    supervisor = {} if state.supervisor_pid is None else {"supervisor": state.supervisor_pid}
    recorded = {**state.pids, **state.server_pids, **supervisor}
    running = sorted(name for name, pid in recorded.items() if alive(pid, state))
    if running:
        raise RuntimeError(
            f"a stack recorded in {state_dir / STATE_FILE} is still running "
            f"({', '.join(running)}); stop it with `greenserve down --state-dir {state_dir}` "
            "or choose another --state-dir"
        )
