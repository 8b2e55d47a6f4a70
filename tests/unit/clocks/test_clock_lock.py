"""The checked NVML clock locker against the fake GPUs (no real GPU is touched)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from shared.gpu.clock_lock import ClockLocker, ClockModule, ClockRefusedError, nearest_clock
from tests import fake_pynvml

NVML: ClockModule = fake_pynvml


def test_a_supported_clock_locks_every_gpu_of_the_instance(node: Path) -> None:
    """Test that one clock from the list is locked as is on all GPUs named."""
    locker = ClockLocker(NVML)
    result = locker.lock([0, 1], 1200)
    assert (result.applied_mhz, result.snapped) == (1200, False)
    assert fake_pynvml.locked_clocks(node) == [(1200, 1200), (1200, 1200)]
    assert result.took_s >= 0.0
    assert locker.locked == {0: 1200, 1: 1200}


def test_a_clock_between_steps_snaps_to_the_nearest_and_says_so(node: Path) -> None:
    """Test that 1003 MHz (A100 steps of 15 from 210) becomes 1005 and the result says so."""
    locker = ClockLocker(NVML)
    result = locker.lock([1], 1003.0)
    assert (result.applied_mhz, result.snapped) == (1005, True)
    assert "nearest, 1005 MHz" in result.message
    assert fake_pynvml.locked_clocks(node) == [None, (1005, 1005)]


@pytest.mark.parametrize("mhz", [3000.0, 100.0, float("nan"), float("inf")])
def test_a_clock_outside_the_supported_range_is_refused_not_clamped(node: Path, mhz: float) -> None:
    """Test that an out-of-range clock changes nothing and names the range."""
    locker = ClockLocker(NVML)
    with pytest.raises(ClockRefusedError, match="210-1410 MHz") as refused:
        locker.lock([0], mhz)
    assert refused.value.reason == "out_of_range"
    assert fake_pynvml.locked_clocks(node) == [None, None]


def test_an_unknown_gpu_is_refused(node: Path) -> None:
    """Test that GPU 2 of a two-GPU node is refused with the node's indices."""
    locker = ClockLocker(NVML)
    with pytest.raises(ClockRefusedError, match="no GPU 2") as refused:
        locker.lock([0, 2], 1200)
    assert refused.value.reason == "unknown_gpu"
    assert fake_pynvml.locked_clocks(node) == [None, None]


def test_missing_privilege_logs_one_error_and_refuses_every_later_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Test NVML_ERROR_NO_PERMISSION: one error logged, the GPUs stay at default clocks."""
    path = tmp_path / "gpus.json"
    fake_pynvml.write_state(path, [fake_pynvml.a100(), fake_pynvml.a100()], privileged=False)
    monkeypatch.setenv(fake_pynvml.STATE_ENV, str(path))
    locker = ClockLocker(NVML)
    with caplog.at_level(logging.ERROR):
        assert locker.reset_all() == {0: "no_permission", 1: "no_permission"}
        for mhz in (900, 1000, 1100):
            with pytest.raises(ClockRefusedError, match="CAP_SYS_ADMIN") as refused:
                locker.lock([0, 1], mhz)
            assert refused.value.reason == "no_permission"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert "NVML_ERROR_NO_PERMISSION" in errors[0].getMessage()
    assert fake_pynvml.locked_clocks(path) == [None, None]
    assert fake_pynvml.read_state(path)["calls"] == []


def test_a_failure_on_one_gpu_resets_the_gpus_locked_by_the_same_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test that an instance never runs with split clocks (GPU 1 lacks locked clocks)."""
    path = tmp_path / "gpus.json"
    gpus = [fake_pynvml.a100(), fake_pynvml.a100(supports_locking=False)]
    fake_pynvml.write_state(path, gpus)
    monkeypatch.setenv(fake_pynvml.STATE_ENV, str(path))
    locker = ClockLocker(NVML)
    with pytest.raises(ClockRefusedError, match="NVML_ERROR_NOT_SUPPORTED") as refused:
        locker.lock([0, 1], 1200)
    assert refused.value.reason == "not_supported"
    assert fake_pynvml.locked_clocks(path) == [None, None]
    assert locker.lock([0], 1200).applied_mhz == 1200  # GPU 0 alone still works
    with pytest.raises(ClockRefusedError, match="NOT_SUPPORTED"):
        locker.lock([1], 1200)


def test_reset_all_undoes_what_a_crashed_agent_left_locked(node: Path) -> None:
    """Test that a new locker's reset_all gives GPUs locked by an earlier process back."""
    ClockLocker(NVML).lock([0, 1], 600)  # never closed: a crash
    assert fake_pynvml.locked_clocks(node) == [(600, 600), (600, 600)]
    assert ClockLocker(NVML).reset_all() == {}
    assert fake_pynvml.locked_clocks(node) == [None, None]


def test_close_resets_every_gpu_and_never_changes_a_power_limit(node: Path) -> None:
    """Test that closing leaves default clocks, and clock code makes no power-limit call."""
    locker = ClockLocker(NVML)
    locker.lock([0], 900)
    locker.lock([1], 1000)
    locker.reset([0])
    assert locker.close() == {}
    assert locker.close() == {}  # idempotent
    assert fake_pynvml.locked_clocks(node) == [None, None]
    calls = fake_pynvml.read_state(node)["calls"]
    assert calls[0] == "nvmlDeviceSetGpuLockedClocks(0,900,900)"
    assert not [c for c in calls if "Power" in c]


def test_states_read_the_clock_nvml_reports(node: Path) -> None:
    """Test the status: SM clock read back, lock, supported range."""
    locker = ClockLocker(NVML)
    locker.lock([1], 990)
    zero, one = locker.states()
    assert (zero.sm_clock_mhz, zero.locked_mhz) == (1410, None)
    assert (one.sm_clock_mhz, one.locked_mhz) == (990, 990)
    assert (one.supported_min_mhz, one.supported_max_mhz) == (210, 1410)


def test_no_driver_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test that NVML failing to start is reported as nvml_unavailable."""
    monkeypatch.delenv(fake_pynvml.STATE_ENV, raising=False)
    with pytest.raises(ClockRefusedError, match="NVML could not start") as refused:
        ClockLocker(NVML)
    assert refused.value.reason == "nvml_unavailable"


def test_nearest_clock_ties_go_up() -> None:
    """Test snapping: between two steps the nearer, at the middle the higher."""
    steps = [210, 225, 240]
    assert nearest_clock(217.0, steps) == 210
    assert nearest_clock(217.5, steps) == 225
    assert nearest_clock(239.0, steps) == 240
