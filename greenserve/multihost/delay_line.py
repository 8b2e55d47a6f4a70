"""A delay line in user space: what a host sends reaches the bridge ``delay_ms`` later.

The fabric delays a host's egress with ``tc netem`` where the kernel has it. Where it does
not (``sch_netem`` is a module many cloud and sandbox kernels leave out), the fabric puts
this process on the host's link instead: the host's ``eth0`` is paired with a link that
is on no bridge (``<link>x``), and a second pair joins ``<link>y`` to the bridge port
``<link>``. This process holds two ``AF_PACKET`` sockets, on ``x`` and ``y``; a frame the
host sends (read on ``x``) is sent on ``y`` once it is ``delay_ms`` old, in the order it
came; a frame for the host (read on ``y``) goes to ``x`` at once. The round trip between
hosts i and j is then ``d_i + d_j`` and from the harness to host i ``d_i``, as with netem.

Frames are read and written with their virtio-net header (``PACKET_VNET_HDR``): veth
passes TCP segments of up to 64 KiB that nothing has split yet, with checksums still to
compute, and the header carries that through unchanged, so the kernel splits and sums
them where they leave, as it would on a plain veth. A partition still detaches only the
bridge port: the line keeps running and what it sends goes nowhere.

A frame the bridge side will not take now (its queue is full) is dropped, as a congested
link would; TCP sends it again. The line exits when either link goes away (the fabric's
close, or the sweep of a run that died) or when the process that started it is gone.
Only the standard library: it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import argparse
import errno
import os
import select
import socket
import sys
import time
from collections import deque
from typing import Final

__all__ = ["READY", "main", "run"]

ETH_P_ALL: Final = 0x0003
SOL_PACKET: Final = 263
"""Not exported by Python's ``socket`` module (linux/socket.h)."""
PACKET_VNET_HDR: Final = 15
"""linux/if_packet.h: frames carry a ``struct virtio_net_hdr`` in front."""
PACKET_OUTGOING: Final = 4
"""linux/if_packet.h: a frame this host sent on the link (our own sends, seen again)."""
RECV_BUFFER: Final = 4 << 20
FRAME_MAX: Final = 70_000
"""A 64-KiB GSO segment with its Ethernet and virtio-net headers."""
BATCH: Final = 256
"""Frames read from one socket before the loop looks at the other and at the clock."""
PARENT_CHECK_S: Final = 0.5
GONE: Final = frozenset({errno.ENXIO, errno.ENODEV, errno.ENETDOWN})
"""Send or receive errors that mean the link is gone."""
READY: Final = "ready"
"""Printed on stdout once both sockets are bound: frames before it would be lost."""


def _bound(link: str) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
    sock.bind((link, 0))
    sock.setblocking(False)
    return sock


def _send(sock: socket.socket, frame: bytes) -> bool:
    """Send one frame; False once the link is gone (a full queue drops the frame)."""
    try:
        sock.send(frame)
    except BlockingIOError:
        return True
    except OSError as exc:
        if exc.errno in GONE:
            return False
        if exc.errno == errno.ENOBUFS:
            return True
        raise
    return True


def run(host_side: str, bridge_side: str, delay_s: float, parent: int) -> int:
    """Forward frames between the two links, host to bridge ``delay_s`` late, until a
    link is gone or ``parent`` is no longer this process's parent. Returns the exit code."""
    host_link = _bound(host_side)
    bridge_link = _bound(bridge_side)
    print(READY, flush=True)
    held: deque[tuple[float, bytes]] = deque()
    checked_at = time.monotonic()
    while True:
        now = time.monotonic()
        while held and held[0][0] <= now:
            if not _send(bridge_link, held.popleft()[1]):
                return 0
        if now - checked_at >= PARENT_CHECK_S:
            checked_at = now
            if os.getppid() != parent:
                return 0
        wait = min(held[0][0] - now, PARENT_CHECK_S) if held else PARENT_CHECK_S
        try:
            ready, _, _ = select.select([host_link, bridge_link], [], [], max(wait, 0.0))
        except InterruptedError:
            continue
        for sock in ready:
            for _ in range(BATCH):
                try:
                    frame, address = sock.recvfrom(FRAME_MAX)
                except BlockingIOError:
                    break
                except OSError as exc:
                    if exc.errno in GONE:
                        return 0
                    raise
                if address[2] == PACKET_OUTGOING:
                    continue
                if sock is host_link:
                    held.append((time.monotonic() + delay_s, frame))
                elif not _send(host_link, frame):
                    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m greenserve.multihost.delay_line HOST_SIDE BRIDGE_SIDE DELAY_MS``."""
    parser = argparse.ArgumentParser(
        prog="python -m greenserve.multihost.delay_line",
        description="Delay the frames read on HOST_SIDE by DELAY_MS before sending them on "
        "BRIDGE_SIDE; pass the other direction at once.",
    )
    parser.add_argument("host_side")
    parser.add_argument("bridge_side")
    parser.add_argument("delay_ms", type=float)
    args = parser.parse_args(argv)
    if args.delay_ms < 0:
        parser.error(f"DELAY_MS must be >= 0, not {args.delay_ms:g}")
    try:
        return run(args.host_side, args.bridge_side, args.delay_ms / 1000.0, os.getppid())
    except OSError as exc:
        print(f"delay line {args.host_side} -> {args.bridge_side}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
