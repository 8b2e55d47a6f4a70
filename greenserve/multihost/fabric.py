"""Hosts on one machine: network namespaces joined by veth pairs to one bridge.

Each host is a network namespace ``gs-<pid>-h<i>`` with one interface, ``eth0``, whose
peer ``gs-<pid>-h<i>`` sits in the root namespace on the bridge ``gs-<pid>-br``. Hosts get
``10.77.<k>.<i+1>/24``; the bridge gets ``.254`` so that this process (the harness, in
the root namespace) reaches every host as a client machine on the same LAN would. Nothing
else on the machine is touched: no forwarding, no NAT, no route beyond the bridge's own
subnet.

- :meth:`Fabric.partition` detaches a host's link from the bridge: its packets go nowhere
  and nothing comes in, while its interface stays up, so its processes see silence (TCP
  retransmits), not an error, as across a cut between racks or regions. :meth:`Fabric.heal`
  attaches it again.
- ``delays_ms`` delays each host's egress, so the round trip between hosts i and j is
  ``d_i + d_j`` and between the harness and host i ``d_i``: with ``tc netem`` where the
  kernel has ``sch_netem``, else with a user-space delay line on the host's link
  (:mod:`greenserve.multihost.delay_line`; :func:`netem_missing` says why netem is not
  used). :attr:`Host.delay_by` names which.

:func:`fabric` is the only way to get one: a context manager that first sweeps what an
earlier run that died left behind (names with the ``gs-<pid>-`` prefix of a process that
no longer runs) and, on exit, even on an error, kills every process still in its
namespaces and deletes the namespaces, links and bridge.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from greenserve.multihost.delay_line import READY

__all__ = [
    "PREFIX",
    "Fabric",
    "FabricError",
    "Host",
    "delay_method",
    "fabric",
    "netem_missing",
    "netns_missing",
    "sweep_stale",
]

logger = logging.getLogger(__name__)

PREFIX = "gs-"
"""Every namespace and root-namespace link the harness makes starts with this, then the
pid of the process that made it (``gs-<pid>-br``, ``gs-<pid>-h0``)."""
_OURS = re.compile(r"^gs-(\d+)-(br|h\d+[xy]?)$")
SUBNET_BASE = "10.77"
"""Hosts get ``10.77.<k>.0/24`` for the first ``k`` from 20 whose subnet no route uses."""
MAX_HOSTS = 16
STOP_WAIT_S = 5.0
LINE_READY_S = 10.0
"""How long a delay line may take to bind its sockets."""


class FabricError(RuntimeError):
    """An ``ip`` or ``tc`` command failed: the command and what it said."""


def _run(args: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise FabricError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


@dataclass(frozen=True, slots=True)
class Host:
    """One host: its name in the harness, its namespace, address and root-side link."""

    name: str
    """``host-<i>``."""
    netns: str
    address: str
    link: str
    """The veth end on the bridge, in the root namespace."""
    delay_ms: float = 0.0
    """Added to every packet the host sends."""
    delay_by: str = ""
    """``netem``, ``line`` (:mod:`greenserve.multihost.delay_line`), or empty: no delay."""

    @property
    def exec_prefix(self) -> list[str]:
        """What runs a command on this host."""
        return ["ip", "netns", "exec", self.netns]


@dataclass(slots=True)
class Fabric:
    """The hosts of one run and the bridge that joins them."""

    bridge: str
    subnet: str
    hosts: list[Host]
    partitioned: set[str] = field(default_factory=set)
    lines: list[subprocess.Popen[str]] = field(default_factory=list)
    """The delay lines' processes (root namespace), stopped first on close."""

    def host(self, name: str) -> Host:
        """The host called ``name`` (``host-<i>``).

        Raises:
            KeyError: no such host, naming the hosts there are.
        """
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(f"no host {name!r}; hosts are {[h.name for h in self.hosts]}")

    def partition(self, name: str) -> None:
        """Cut ``name`` off from every other host and from the harness (idempotent)."""
        host = self.host(name)
        _run(["ip", "link", "set", host.link, "nomaster"])
        self.partitioned.add(name)

    def heal(self, name: str) -> None:
        """Join ``name`` to the bridge again (idempotent)."""
        host = self.host(name)
        _run(["ip", "link", "set", host.link, "master", self.bridge])
        self.partitioned.discard(name)

    def close(self) -> None:
        """Kill what still runs on the hosts and the delay lines, then delete the hosts,
        their links and the bridge."""
        for line in self.lines:
            line.kill()
        for line in self.lines:
            with contextlib.suppress(subprocess.TimeoutExpired):
                line.wait(STOP_WAIT_S)
        for host in self.hosts:
            _kill_inside(host.netns)
        for host in self.hosts:
            _run(["ip", "netns", "delete", host.netns], check=False)
            # Gone with the namespace or their peers, usually.
            for link in (host.link, f"{host.link}x", f"{host.link}y"):
                if _link_exists(link):
                    _run(["ip", "link", "delete", link], check=False)
        _run(["ip", "link", "delete", self.bridge], check=False)


def _link_exists(name: str) -> bool:
    return os.path.exists(f"/sys/class/net/{name}")


def _kill_inside(netns: str) -> None:
    """SIGKILL every process in ``netns`` (all started by the harness) and wait for them."""
    listed = _run(["ip", "netns", "pids", netns], check=False).stdout.split()
    pids = [int(p) for p in listed if p.isdigit()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + STOP_WAIT_S
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if os.path.exists(f"/proc/{p}")]
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Delete the namespaces and links an earlier harness left (its process is gone);
    return their names."""
    netns = [line.split()[0] for line in _run(["ip", "netns", "list"]).stdout.splitlines() if line]
    links = [
        line.split(":")[1].strip().split("@")[0]
        for line in _run(["ip", "-o", "link", "show"]).stdout.splitlines()
        if line.count(":") >= 2
    ]
    swept = []
    for name in netns:
        found = _OURS.match(name)
        if found and not _alive(int(found.group(1))):
            _kill_inside(name)
            _run(["ip", "netns", "delete", name], check=False)
            swept.append(name)
    for name in links:
        found = _OURS.match(name)
        if found and not _alive(int(found.group(1))):
            _run(["ip", "link", "delete", name], check=False)
            swept.append(name)
    if swept:
        logger.warning("removed what an earlier multi-host run left: %s", ", ".join(swept))
    return swept


def netns_missing() -> str | None:
    """Why network namespaces cannot be made here (not root, no ``ip``, refused), or None."""
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    probe = f"{PREFIX}{os.getpid()}-h{MAX_HOSTS}"
    try:
        done = _run(["ip", "netns", "add", probe], check=False)
    except FileNotFoundError:
        return "the ip command (iproute2) is not installed"
    if done.returncode != 0:
        return f"ip netns add was refused: {done.stderr.strip()}"
    _run(["ip", "netns", "delete", probe], check=False)
    return None


def netem_missing() -> str | None:
    """Why ``tc netem`` cannot delay packets here, or None (probed on a throwaway
    namespace's loopback)."""
    reason = netns_missing()
    if reason is not None:
        return reason
    probe = f"{PREFIX}{os.getpid()}-h{MAX_HOSTS}"
    _run(["ip", "netns", "add", probe])
    try:
        done = _run(
            ["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem"],
            check=False,
        )
    except FileNotFoundError:
        return "the tc command (iproute2) is not installed"
    finally:
        _run(["ip", "netns", "delete", probe], check=False)
    if done.returncode != 0:
        return f"this kernel has no tc netem: {done.stderr.strip()}"
    return None


def delay_method(delays_ms: Sequence[float]) -> str:
    """How :func:`fabric` delays hosts for ``delays_ms``: ``netem``, ``line`` (no netem
    here), or empty (no delay)."""
    if not any(delays_ms):
        return ""
    return "netem" if netem_missing() is None else "line"


def _free_subnet() -> str:
    routes = _run(["ip", "-4", "route", "show", "table", "all"]).stdout
    addresses = _run(["ip", "-4", "-o", "addr", "show"]).stdout
    for k in range(20, 255):
        subnet = f"{SUBNET_BASE}.{k}."
        if subnet not in routes and subnet not in addresses:
            return f"{SUBNET_BASE}.{k}.0/24"
    raise FabricError(f"every {SUBNET_BASE}.20-254.0/24 subnet is in use")


@contextlib.contextmanager
def fabric(hosts: int, delays_ms: Sequence[float] = ()) -> Iterator[Fabric]:
    """``hosts`` hosts on one bridge, host i delaying what it sends by ``delays_ms[i]``
    (missing ones: none); everything is removed on exit.

    Raises:
        ValueError: a host count outside 1..16, or more delays than hosts.
        FabricError: namespaces cannot be made here (the reason), a delay line did not
            start, or a command failed (what was made is removed first).
    """
    if not 1 <= hosts <= MAX_HOSTS:
        raise ValueError(f"a fabric has 1 to {MAX_HOSTS} hosts, not {hosts}")
    if len(delays_ms) > hosts:
        raise ValueError(f"{len(delays_ms)} delays for {hosts} hosts")
    if any(d < 0 for d in delays_ms):
        raise ValueError(f"delays are milliseconds >= 0, not {list(delays_ms)}")
    reason = netns_missing()
    if reason is not None:
        raise FabricError(reason)
    delay_by = delay_method(delays_ms)
    if delay_by == "line":
        logger.info("delaying with user-space delay lines: this kernel has no tc netem")
    sweep_stale()
    tag = f"{PREFIX}{os.getpid()}"
    net = ipaddress.ip_network(_free_subnet())
    made = Fabric(bridge=f"{tag}-br", subnet=str(net), hosts=[])
    try:
        _run(["ip", "link", "add", made.bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{net[254]}/{net.prefixlen}", "dev", made.bridge])
        _run(["ip", "link", "set", made.bridge, "up"])
        for i in range(hosts):
            delay = float(delays_ms[i]) if i < len(delays_ms) else 0.0
            host = Host(
                f"host-{i}",
                f"{tag}-h{i}",
                str(net[i + 1]),
                f"{tag}-h{i}",
                delay,
                delay_by if delay > 0 else "",
            )
            made.hosts.append(host)
            line = _make_host(host, made.bridge, net.prefixlen)
            if line is not None:
                made.lines.append(line)
        yield made
    finally:
        made.close()


def _make_host(host: Host, bridge: str, prefixlen: int) -> subprocess.Popen[str] | None:
    """Make ``host``; return its delay line's process if it has one."""
    _run(["ip", "netns", "add", host.netns])
    # With a delay line the host's eth0 pairs with a link on no bridge, and a second pair
    # joins the line's other side to the bridge port (greenserve.multihost.delay_line).
    line = host.delay_by == "line"
    peer = f"{host.link}x" if line else host.link
    _run(["ip", "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", host.netns])
    if line:
        _run(["ip", "link", "add", f"{host.link}y", "type", "veth", "peer", "name", host.link])
        for link in (peer, f"{host.link}y"):
            _run(["ip", "link", "set", link, "up"])
    _run(["ip", "link", "set", host.link, "master", bridge, "up"])
    inside = ["ip", "-n", host.netns]
    _run([*inside, "addr", "add", f"{host.address}/{prefixlen}", "dev", "eth0"])
    _run([*inside, "link", "set", "eth0", "up"])
    _run([*inside, "link", "set", "lo", "up"])
    if host.delay_by == "netem":
        netem = ["tc", "qdisc", "add", "dev", "eth0", "root", "netem"]
        _run([*host.exec_prefix, *netem, "delay", f"{host.delay_ms:g}ms"])
    if not line:
        return None
    return _start_line(peer, f"{host.link}y", host.delay_ms)


def _start_line(host_side: str, bridge_side: str, delay_ms: float) -> subprocess.Popen[str]:
    """Start a delay line and wait until it has bound its sockets.

    Raises:
        FabricError: it exited or did not say it was ready in time (what it said).
    """
    args = [sys.executable, "-m", "greenserve.multihost.delay_line"]
    proc = subprocess.Popen(
        [*args, host_side, bridge_side, f"{delay_ms:g}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None  # stdout=PIPE above
    ready, _, _ = select.select([proc.stdout], [], [], LINE_READY_S)
    said = proc.stdout.readline().strip() if ready else ""
    if said != READY:
        proc.kill()
        _, err = proc.communicate(timeout=STOP_WAIT_S)
        raise FabricError(f"the delay line on {host_side} did not start: {err.strip() or said}")
    return proc
