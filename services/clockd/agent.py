"""The clock agent's socket server: line-JSON requests in, NVML clock changes out.

One :class:`~shared.gpu.clock_lock.ClockLocker` holds the node's NVML session. Every NVML
call runs in one worker thread, so calls never overlap and the event loop that answers
the socket never waits on the driver. The protocol is :mod:`shared.gpu.clock_agent`.

Safety, besides the locker's checks: every GPU is reset at start (an agent that was
killed, even with SIGKILL, leaves no GPU pinned past its restart) and at exit, which
:func:`run_agent` reaches on SIGTERM, SIGINT and SIGHUP as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import logging
import os
import signal
import socket
import stat
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final, TypeVar

import msgspec
from prometheus_client import Counter, Histogram

from shared.gpu.clock_agent import (
    MAX_LINE_BYTES,
    AgentReply,
    AgentRequest,
    ClockStatus,
    GpuState,
    LockClock,
    ResetClocks,
    decode_request,
    encode_line,
)
from shared.gpu.clock_lock import ClockLocker, ClockRefusedError
from shared.metrics_http import start_metrics_server

__all__ = ["CHANGE_SECONDS", "REFUSALS", "SOCKET_MODE", "ClockAgent", "bind_socket", "run_agent"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

SOCKET_MODE: Final = 0o660
"""Owner and group may connect (the group of the serving processes); nobody else."""
WARN_EVERY_S: Final = 60.0
"""A refusal of one kind is logged at most this often (a policy may repeat it each period)."""

CHANGE_SECONDS: Final = Histogram(
    "greenserve_clockd_change_seconds",
    "NVML time of one clock change by the clock agent (all GPUs of the request)",
    ["op"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)
REFUSALS: Final = Counter(
    "greenserve_clockd_refusals_total",
    "Clock agent requests refused, by reason (no_permission, not_supported, out_of_range, ...)",
    ["reason"],
)


class ClockAgent:
    """Answers clock requests on behalf of one locker."""

    def __init__(self, locker: ClockLocker, executor: ThreadPoolExecutor) -> None:
        """Serve ``locker``, calling it only in ``executor`` (one thread)."""
        self._locker = locker
        self._executor = executor
        self._warned: dict[str, float] = {}

    async def _call(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _refused(self, reason: str, message: str) -> AgentReply:
        REFUSALS.labels(reason).inc()
        now = time.monotonic()
        # no_permission / not_supported were logged once, as errors, by the locker.
        if reason not in ("no_permission", "not_supported") and (
            now - self._warned.get(reason, -WARN_EVERY_S) >= WARN_EVERY_S
        ):
            self._warned[reason] = now
            logger.warning("refused a clock request (%s): %s", reason, message)
        return AgentReply(ok=False, reason=reason, message=message)

    async def answer(self, line: bytes) -> AgentReply:
        """The reply to one request line (never raises for bad input)."""
        try:
            request = decode_request(line)
        except msgspec.DecodeError as exc:
            return self._refused("bad_request", f"not a clock agent request: {exc}")
        try:
            return await self._apply(request)
        except ClockRefusedError as exc:
            return self._refused(exc.reason, str(exc))
        except Exception as exc:  # a driver surprise must not end the node's only agent
            logger.exception("clock request %r failed", request)
            return self._refused("nvml_error", f"the clock agent failed: {exc!r}")

    async def _apply(self, request: AgentRequest) -> AgentReply:
        locker = self._locker
        if isinstance(request, LockClock):
            gpus, mhz = request.gpus, request.clock_mhz
            result = await self._call(lambda: locker.lock(gpus, mhz))
            CHANGE_SECONDS.labels("lock").observe(result.took_s)
            if result.snapped:
                logger.info("GPU %s: %s", list(result.gpus), result.message)
            return AgentReply(
                ok=True,
                applied_mhz=result.applied_mhz,
                snapped=result.snapped,
                took_s=result.took_s,
                message=result.message,
            )
        if isinstance(request, ResetClocks):
            gpus = request.gpus
            took = await self._call(lambda: locker.reset(gpus))
            CHANGE_SECONDS.labels("reset").observe(took)
            return AgentReply(ok=True, took_s=took, message="reset to default clocks")
        assert isinstance(request, ClockStatus)
        wanted = request.gpus
        states = await self._call(lambda: locker.states(wanted))
        return AgentReply(
            ok=True,
            gpus=[
                GpuState(
                    index=s.index,
                    sm_clock_mhz=s.sm_clock_mhz,
                    locked_mhz=s.locked_mhz,
                    supported_min_mhz=s.supported_min_mhz,
                    supported_max_mhz=s.supported_max_mhz,
                    unavailable=s.unavailable,
                )
                for s in states
            ],
        )

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer the requests of one connection, in order, until it closes."""
        try:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:  # the line outgrew the reader's limit
                    reply = self._refused(
                        "bad_request", f"request line longer than {MAX_LINE_BYTES} bytes"
                    )
                    writer.write(encode_line(reply))
                    await writer.drain()
                    return
                if not line:
                    return
                if not line.strip():
                    continue
                writer.write(encode_line(await self.answer(line)))
                await writer.drain()
        except ConnectionError:
            return  # the client went away; nothing of ours is left half done
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


def _another_agent_listens(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def bind_socket(path: Path, group: str | None = None) -> socket.socket:
    """A listening Unix socket at ``path`` with mode 0660 (and ``group``, when given).

    A socket file left by a killed agent is replaced; a live agent's is not.

    Raises:
        RuntimeError: another agent listens there, or something other than a socket is there.
    """
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise RuntimeError(f"{path} exists and is not a socket; not replacing it")
        if _another_agent_listens(path):
            raise RuntimeError(f"another clock agent listens on {path}")
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o117)  # never world-accessible, not even between bind and chmod
    try:
        sock.bind(str(path))
    finally:
        os.umask(old_umask)
    os.chmod(path, SOCKET_MODE)
    if group is not None:
        os.chown(path, -1, grp.getgrnam(group).gr_gid)
    sock.listen(16)
    sock.setblocking(False)
    return sock


def _log_reset(failed: dict[int, str], count: int, when: str) -> None:
    if not failed:
        logger.info("%s: reset %d GPUs to default clocks", when, count)
    else:
        causes = ", ".join(f"GPU {i}: {reason}" for i, reason in sorted(failed.items()))
        # The cause (privilege, support) was logged once, as an error, by the locker.
        logger.warning("%s: could not reset every GPU (%s)", when, causes)


async def run_agent(
    locker: ClockLocker,
    path: Path,
    *,
    group: str | None = None,
    metrics_port: int = 0,
    ready: Callable[[], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Reset every GPU, serve ``path`` until SIGTERM/SIGINT/SIGHUP, then reset them again.

    Once the socket is bound, ``locker`` is closed (every GPU reset, NVML shut down) on the
    way out, whatever ends it.

    Args:
        locker: the node's GPUs.
        path: the socket to listen on.
        group: group given the socket.
        metrics_port: serve ``/metrics`` on this local port (0: off).
        ready: called once the socket answers.
        stop: ends the agent when set, as a signal does (in-process tests).

    Raises:
        RuntimeError: the socket path is taken (nothing was reset then).
    """
    # Bound before any GPU is touched: a second agent started by mistake must fail here,
    # not reset the clocks the running one locked.
    sock = bind_socket(path, group)
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvml")
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    server: asyncio.Server | None = None
    metrics = None
    try:
        failed = await loop.run_in_executor(executor, locker.reset_all)
        _log_reset(failed, locker.gpu_count, "start-up")
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, stop.set)
        agent = ClockAgent(locker, executor)
        server = await asyncio.start_unix_server(agent.handle, sock=sock, limit=MAX_LINE_BYTES)
        if metrics_port:
            metrics = await start_metrics_server("127.0.0.1", metrics_port)
        logger.info("clock agent listens on %s (%d GPUs)", path, locker.gpu_count)
        if ready is not None:
            ready()
        await stop.wait()
        logger.info("clock agent stopping")
    finally:
        if server is not None:
            server.close()
        else:
            sock.close()
        with contextlib.suppress(OSError):
            path.unlink()  # noqa: ASYNC240 (one unlink at exit; nothing else waits on the loop)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        failed = await loop.run_in_executor(executor, locker.close)
        _log_reset(failed, locker.gpu_count, "exit")
        executor.shutdown(wait=True)
        if metrics is not None:
            await metrics.cleanup()
