"""The CPU a control-plane bench step is charged: per process, whole machine, and when idle.

Read from ``/proc`` so the stack's servers (NATS, Redis) count as well as its services, and
so what the stack does not account for (another tenant, a process an earlier run left
behind, the hypervisor's steal) shows beside it. Kept apart from the step itself because
``tools/profile_request_path.py`` and the tests read the same clock.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from greenserve.local import LocalStack

__all__ = ["CLOCK_TICKS", "QUIET_CORES", "cpu_s", "machine_s", "named_pids", "wait_quiet"]

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
QUIET_CORES = 0.3
"""The stack counts as settled when its processes use less CPU than this at no load (the
forecaster fits its models at start-up, which would otherwise be charged to the first steps)."""


def cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes have used so far; one gone counts none."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / CLOCK_TICKS


def machine_s() -> tuple[float, float]:
    """Seconds the whole machine's CPUs spent busy and stolen by the hypervisor so far, from
    ``/proc/stat``: what a step's own processes do not account for is someone else's work."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice, already in user]
    busy = sum(fields[:8]) - fields[3] - fields[4] - fields[7]
    return busy / CLOCK_TICKS, fields[7] / CLOCK_TICKS


def wait_quiet(pids: list[int], timeout_s: float = 90.0, stacks: int = 1) -> float:
    """Wait until the idle stacks' start-up work is done; return the idle CPU (cores).

    Each of ``stacks`` may idle at up to :data:`QUIET_CORES` (heartbeats, control loops),
    so N cells settle below N times that, not below one stack's bound they would never
    reach.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        before = cpu_s(pids)
        time.sleep(1.0)
        idle = cpu_s(pids) - before
        if idle < QUIET_CORES * stacks or time.monotonic() > deadline:
            return idle


def named_pids(stacks: list[LocalStack]) -> dict[str, int]:
    """Every stack process and server by name; a second cell's names carry its namespace."""
    named: dict[str, int] = {}
    for i, stack in enumerate(stacks):
        prefix = "" if i == 0 else f"{stack.state.namespace}/"
        for name, pid in {**stack.state.pids, **stack.state.server_pids}.items():
            named[prefix + name] = pid
    return named
