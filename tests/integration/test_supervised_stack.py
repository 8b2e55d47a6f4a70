"""``greenserve up``'s supervisor on a real stack: a killed service comes back, counted."""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import pytest

from greenserve.commands._status_report import report_status
from greenserve.local import load_state, start_local_stack
from greenserve.local.processes import alive
from greenserve.local.supervisor import SupervisorSettings
from greenserve.stack import StackSpec
from shared.servers import ServerProcess

pytestmark = pytest.mark.connected


def test_a_service_killed_under_up_is_restarted_and_status_shows_it(
    tmp_path: Path,
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Test that SIGKILL of the planner of a supervised stack is followed by a new planner
    process, one restart in ``greenserve status --json``, and that stopping the stack stops
    the restarted process too."""
    spec = StackSpec(
        namespace=namespace, workers=1, regions=("PJM",), extra={"shutdown_timeout_s": 1.0}
    )
    settings = SupervisorSettings(poll_s=0.1, first_backoff_s=0.2)
    stack = start_local_stack(
        spec,
        tmp_path,
        nats_url=nats_server.url,
        redis_url=redis_server.url,
        supervise=settings,
    )
    restarted = 0
    try:
        stack.wait_ready(timeout_s=90.0)
        before = stack.state.pids["planner"]
        os.kill(before, signal.SIGKILL)
        deadline = time.monotonic() + 20.0
        while load_state(tmp_path).restarts.get("planner", 0) < 1:
            assert time.monotonic() < deadline, "the planner was not restarted"
            time.sleep(0.1)
        state = load_state(tmp_path)
        restarted = state.pids["planner"]
        assert restarted != before
        assert alive(restarted, state)

        capsys.readouterr()
        assert report_status(argparse.Namespace(state_dir=tmp_path, json=True)) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["restarts"]["planner"] == 1
        assert report["processes"]["planner"] is True
        assert report["supervised"] is True
    finally:
        stack.stop(timeout_s=5.0)
    assert restarted
    deadline = time.monotonic() + 10.0
    while alive(restarted) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(restarted)
