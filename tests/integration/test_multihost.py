"""Multi-host on one machine: three network-namespace hosts on one bridge, the NATS
cluster, the Redis primary, replica and Sentinels and every service spread over them. A
NATS node is killed, then a whole host is cut off and joined again, mid-replay. Skipped
where network namespaces cannot be made (not root, no iproute2, a sandbox that refuses
them)."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys

import pytest

from greenserve.faults import PARTITION_S, run_scenario
from greenserve.multihost.fabric import PREFIX, delay_method, fabric, netns_missing
from loadgen.traces import load_azure_trace, resolve_trace
from tests.integration.test_replicated_servers import TOKEN_GAPS_BOUND

PARTITION_LOST_BOUND = 6
"""Requests a 10-s host partition may leave unanswered end to end. The design is 0. Runs
lost 2-6 of 300 before the cut-off worker kept its answers, and 9 in one of five delayed
runs while a worker whose NATS node was cut off (the store still reachable) confirmed
contact through its heartbeats; with the NATS round trip in the contact (and services on
their own host's node) 0 in every run since. Bounded, not zero, until CI has shown it."""

pytestmark = [
    pytest.mark.connected,
    pytest.mark.skipif(
        (reason := netns_missing()) is not None,
        reason=f"no network namespaces here: {reason}",
    ),
]

DELAY_SLACK_MS = 8.0
"""A round trip may exceed its delays by the probe's own time on a loaded 2-core host (the
connect through Python, the delay line's wake-up); it may not fall short of them by more
than the clock's granularity."""

REGION_DELAYS_MS = (15.0, 25.0, 40.0)
"""What each host adds to what it sends: round trips of 40, 55 and 65 ms between hosts, as
between regions (the issue's 30-80 ms)."""

REQUESTS = 150
"""About 50 s of the conversation trace at the bench's ten-fold speed-up."""


def _ours() -> list[str]:
    """Namespaces and links this process made (its ``gs-<pid>-`` names) that still exist."""
    tag = f"{PREFIX}{os.getpid()}-"
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return [word for word in (names + links).split() if word.strip(":").startswith(tag)]


def test_hosts_reach_each_other_until_partitioned_and_leave_nothing_behind() -> None:
    """Test that every host reaches every other by address, a partitioned host reaches
    none and is reached by none until healed, and that leaving the block (here by an
    error) removes every namespace and link made."""

    def reaches(src_netns: str, address: str) -> bool:
        try:
            _connect_ms(src_netns, address, tries=1, timeout_s=1.0)
        except subprocess.CalledProcessError:
            return False
        return True

    def cut_and_heal() -> None:
        with fabric(3) as hosts:
            a, b, c = hosts.hosts
            assert reaches(a.netns, b.address)
            assert reaches(c.netns, a.address)
            hosts.partition(c.name)
            assert not reaches(a.netns, c.address)
            assert not reaches(c.netns, b.address)
            assert reaches(a.netns, b.address)
            hosts.heal(c.name)
            assert reaches(c.netns, b.address)
            raise RuntimeError("leave the block by an error")

    with pytest.raises(RuntimeError, match="leave"):
        cut_and_heal()
    assert _ours() == []


def _connect_ms(src_netns: str, address: str, tries: int = 5, timeout_s: float = 2.0) -> float:
    """The fastest of ``tries`` TCP connects from ``src_netns`` to a closed port of
    ``address`` (SYN out, RST back: one round trip), in milliseconds.

    Raises:
        subprocess.CalledProcessError: a connect timed out (the host did not answer).
    """
    probe = (
        "import socket, time\n"
        "best = 1e9\n"
        f"for _ in range({tries}):\n"
        "    t = time.monotonic()\n"
        "    try:\n"
        f"        socket.create_connection(('{address}', 9), {timeout_s})\n"
        "    except ConnectionRefusedError:\n"
        "        best = min(best, time.monotonic() - t)\n"
        "print(best * 1000)\n"
    )
    done = subprocess.run(
        ["ip", "netns", "exec", src_netns, sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout)


def _took(measured_ms: float, delays_ms: float) -> bool:
    """Whether a round trip took its delays: not less (but for the clock's granularity),
    and not more than :data:`DELAY_SLACK_MS` beyond."""
    return delays_ms - 0.5 <= measured_ms <= delays_ms + DELAY_SLACK_MS


def _bulk_sha(src_netns: str, dst_netns: str, address: str, size: int) -> tuple[str, str]:
    """Send ``size`` random bytes over one TCP connection from ``src_netns`` to a listener
    on ``address`` in ``dst_netns``; the SHA-256 sent and the one received."""
    listen = (
        "import hashlib, socket\n"
        f"s = socket.create_server(('{address}', 5001))\n"
        "print('up', flush=True)\n"
        "c, _ = s.accept()\n"
        "h = hashlib.sha256()\n"
        "while chunk := c.recv(1 << 16):\n"
        "    h.update(chunk)\n"
        "print(h.hexdigest(), flush=True)\n"
    )
    send = (
        "import hashlib, os, socket\n"
        f"data = os.urandom({size})\n"
        f"c = socket.create_connection(('{address}', 5001), 5)\n"
        "c.sendall(data)\n"
        "c.close()\n"
        "print(hashlib.sha256(data).hexdigest())\n"
    )
    exec_in = ["ip", "netns", "exec"]
    server = subprocess.Popen(
        [*exec_in, dst_netns, sys.executable, "-c", listen], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "up"
        sent = subprocess.run(
            [*exec_in, src_netns, sys.executable, "-c", send],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
        received = server.stdout.readline().strip()
    finally:
        server.kill()
        server.wait()
    return sent, received


def test_a_host_delays_what_it_sends_and_the_delay_line_leaves_nothing_behind() -> None:
    """Test that with delays (20, 0, 5) ms the round trip between two hosts is the sum of
    their delays and from the harness a host's own (netem, or the user-space delay line
    where this kernel has no netem), that megabytes cross a delayed link intact (the line
    passes unsplit TCP segments through), that a partition still cuts a delayed host off,
    and that leaving the block removes every namespace, link and delay-line process."""
    with fabric(3, [20.0, 0.0, 5.0]) as hosts:
        a, b, c = hosts.hosts
        assert [h.delay_by for h in hosts.hosts] == [delay_method([1.0]), "", delay_method([1.0])]
        lines = [line.pid for line in hosts.lines]
        assert _took(_connect_ms(b.netns, a.address), 20.0)
        assert _took(_connect_ms(b.netns, c.address), 5.0)
        assert _took(_connect_ms(a.netns, c.address), 25.0)
        sent, received = _bulk_sha(a.netns, c.netns, c.address, 8 << 20)
        assert sent == received
        hosts.partition(c.name)
        with pytest.raises(subprocess.CalledProcessError):
            _connect_ms(a.netns, c.address)
        hosts.heal(c.name)
        assert _took(_connect_ms(a.netns, c.address), 25.0)
    assert _ours() == []
    assert not [pid for pid in lines if os.path.exists(f"/proc/{pid}")]


@pytest.mark.parametrize(
    ("scenario", "delays_ms"),
    # The node kill runs under the regions' network delays only: the same kill without them
    # asserted the same and was the easier case.
    [("partition:host-2", ()), ("kill:nats-1", REGION_DELAYS_MS)],
    ids=["partition:host-2", "kill:nats-1,delayed"],
)
async def test_a_fault_on_one_host_is_survived_and_leaves_it_consistent(
    scenario: str, delays_ms: tuple[float, ...]
) -> None:
    """Test that with every server and service on its own network-namespace host, killing
    a NATS node mid-replay, or cutting a whole host off (a NATS node, a Sentinel, a worker
    and the planner on it) and joining it again, fails nothing, loses nothing (a partition:
    at most PARTITION_LOST_BOUND, see below), serves again
    within 10 s of the heal and ends consistent; the node kill answers nothing twice, the
    partition at most the requests on their way at the cut. The cut-off worker finishes
    what it holds; its answers vanish into its own host's NATS node, so it keeps them and,
    once back, sends those the router did not revoke and run elsewhere (docs/deploy.md,
    Multi-host on one machine). With the hosts 40-65 ms apart (REGION_DELAYS_MS) the node
    kill costs nothing more."""
    trace = load_azure_trace(resolve_trace("conv"), max_requests=REQUESTS)
    outcome = await asyncio.to_thread(
        functools.partial(run_scenario, multihost=True, delays_ms=delays_ms), scenario, trace
    )
    assert outcome.stream_replicas == 3, outcome
    assert outcome.failed == 0, outcome
    assert outcome.completed + outcome.lost == len(trace), outcome
    if scenario.startswith("partition:"):
        # The design is 0 lost (the cut-off worker keeps its answers and re-sends the
        # unrevoked ones; tests/integration/test_worker_out_of_contact.py holds that part
        # exactly); see PARTITION_LOST_BOUND for what runs lost before.
        assert outcome.lost <= PARTITION_LOST_BOUND, outcome
    else:
        assert outcome.lost == 0, outcome
    if scenario.startswith("partition:"):
        # Only an answer already on its way when the host was cut off (held in a stalled
        # connection, delivered after the heal) can reach the client beside the other
        # worker's; the requests held at the cut bound them (docs/deploy.md).
        assert outcome.held_by_cut_host is not None, outcome
        assert outcome.duplicated <= outcome.held_by_cut_host, outcome
    else:
        assert outcome.duplicated == 0, outcome
    # A client on a killed or cut-off node misses the token chunks sent while it moves
    # (core NATS, at most once; docs/deploy.md, "What each fault costs").
    assert outcome.token_mismatch <= TOKEN_GAPS_BOUND, outcome
    assert outcome.leftover_records == 0, outcome
    assert outcome.recovery_s is not None, outcome
    # Served again, at the latest, soon after the host came back.
    assert outcome.recovery_s < PARTITION_S + 10.0, outcome
    assert _ours() == []
