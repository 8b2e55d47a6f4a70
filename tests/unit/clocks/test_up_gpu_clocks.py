"""``greenserve up --gpu-clocks nvml``: the stack it describes, and the checks before it starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from greenserve.commands.up import gpu_clock_problem
from greenserve.runner import write_config
from greenserve.stack import CLOCK_AGENT_MODULE, StackSpec, stack_launches
from shared.config import CONFIG_FILE_ENV
from tests import fake_pynvml
from tests.unit.clocks.helpers import ROOT, clockd_log, reap, stop_gently, wait_answering


def test_the_stack_runs_the_clock_agent_and_gives_each_worker_its_gpus() -> None:
    """Test the clock agent's launch and the workers' opt-in settings (tp 2: two GPUs each)."""
    spec = StackSpec(
        workers=2, regions=("PJM",), tp=2, gpu_clocks="nvml", clock_agent_socket="/tmp/c.sock"
    )
    launches = {launch.name: launch for launch in stack_launches(spec)}
    agent = launches["clockd"]
    assert agent.module == CLOCK_AGENT_MODULE
    assert agent.settings.worker.clock_agent_socket == "/tmp/c.sock"
    workers = [launches["worker-0"].settings.worker, launches["worker-1"].settings.worker]
    assert [w.nvml_gpu_indices for w in workers] == [(0, 1), (2, 3)]
    assert {w.gpu_clocks for w in workers} == {"nvml"}
    assert {w.clock_agent_socket for w in workers} == {"/tmp/c.sock"}


def test_by_default_no_clock_agent_runs_and_workers_keep_simulated_clocks() -> None:
    """Test the default stack: opt-in means off unless asked."""
    launches = stack_launches(StackSpec(workers=2, regions=("PJM",)))
    assert CLOCK_AGENT_MODULE not in {launch.module for launch in launches}
    assert {launch.settings.worker.gpu_clocks for launch in launches} == {"off"}


def test_a_machine_with_enough_gpus_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Test the check against a fake node of two GPUs."""
    state = tmp_path / "gpus.json"
    fake_pynvml.write_state(state, [fake_pynvml.a100(), fake_pynvml.a100()])
    monkeypatch.setenv(fake_pynvml.STATE_ENV, str(state))
    assert gpu_clock_problem(2, 1, fake_pynvml) == ""
    assert "need 4 GPUs" in gpu_clock_problem(4, 1, fake_pynvml)
    assert "drop --cells" in gpu_clock_problem(2, 2, fake_pynvml)
    assert fake_pynvml.read_state(state)["calls"] == []  # the check changes nothing


def test_a_machine_without_nvidia_driver_gets_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test the error where NVML cannot start (this fake finds no driver library)."""
    monkeypatch.delenv(fake_pynvml.STATE_ENV, raising=False)
    problem = gpu_clock_problem(1, 1, fake_pynvml)
    assert problem.startswith("no NVIDIA GPU found here")
    assert "NVML Shared Library Not Found" in problem


def test_the_stack_agent_listens_where_its_settings_file_says(
    node: Path, socket_path: Path, tmp_path: Path
) -> None:
    """Test the launch as ``greenserve up`` starts it: no --socket, the settings file names it."""
    spec = StackSpec(
        workers=1, regions=("PJM",), gpu_clocks="nvml", clock_agent_socket=str(socket_path)
    )
    launch = next(x for x in stack_launches(spec) if x.module == CLOCK_AGENT_MODULE)
    config = write_config(launch, tmp_path / "config")
    env = {**os.environ, CONFIG_FILE_ENV: str(config), fake_pynvml.STATE_ENV: str(node)}
    with open(clockd_log(socket_path), "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", launch.module, "--nvml-module", "tests.fake_pynvml"],
            cwd=ROOT,
            env=env,
            stderr=log,
        )
    try:
        wait_answering(proc, socket_path)
        assert stop_gently(proc) == 0
    finally:
        reap(proc)
