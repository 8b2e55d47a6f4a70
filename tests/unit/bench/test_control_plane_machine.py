"""How ``greenserve bench control-plane`` sees CPU spent outside the stack it measures."""

from __future__ import annotations

import subprocess
import sys
import time

from greenserve.bench.control_plane.cpu import machine_s


def test_a_process_outside_the_stack_shows_in_the_machine_busy_time() -> None:
    """Test that a second of another process spinning counts as at least half a second of
    the machine's busy time (a shared host may steal some of it), and that busy and steal
    only grow."""
    busy0, steal0 = machine_s()
    t0 = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import time\nend = time.monotonic() + 1.0\nwhile time.monotonic() < end: pass",
        ],
        check=True,
    )
    busy1, steal1 = machine_s()
    assert busy1 - busy0 >= 0.5
    assert busy1 - busy0 <= (time.monotonic() - t0) * 64  # seconds, not ticks
    assert steal1 >= steal0 >= 0.0
