"""NVML backend against a fake pynvml module (no GPU is ever touched)."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import pytest

from services.dvfs.nvml_backend import (
    ClockOutOfRangeError,
    NvmlBackend,
    NvmlBackendError,
    NvmlDisabledError,
    NvmlUnavailableError,
    load_pynvml,
)


class FakeNvmlError(Exception):
    """Stands for pynvml.NVMLError."""


class FakeNvml:
    """Records calls the way pynvml would receive them."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVMLError = FakeNvmlError

    def __init__(self, graphics: dict[int, list[int]], *, refuse_lock: bool = False) -> None:
        self.graphics = graphics
        self.refuse_lock = refuse_lock
        self.initialised = 0
        self.shutdowns = 0
        self.locked: dict[int, tuple[int, int]] = {}
        self.resets: list[int] = []

    def nvmlInit(self) -> None:
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index not in self.graphics:
            raise FakeNvmlError(f"no GPU {index}")
        return index

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 250_000 + handle * 1000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        return 5_000_000

    def nvmlDeviceGetClockInfo(self, handle: int, clock_type: int) -> int:
        assert clock_type == self.NVML_CLOCK_SM
        return self.locked.get(handle, (1410, 1410))[0]

    def nvmlDeviceGetSupportedMemoryClocks(self, handle: int) -> Sequence[int]:
        return [1215, 810]

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: int, memory_clock: int) -> Sequence[int]:
        assert memory_clock == 1215
        return sorted(self.graphics[handle], reverse=True)  # NVML lists them descending

    def nvmlDeviceSetGpuLockedClocks(self, handle: int, low: int, high: int) -> None:
        if self.refuse_lock:
            raise FakeNvmlError("Insufficient Permissions")
        self.locked[handle] = (low, high)

    def nvmlDeviceResetGpuLockedClocks(self, handle: int) -> None:
        self.resets.append(handle)
        self.locked.pop(handle, None)


A100_CLOCKS = list(range(210, 1411, 15))


def test_backend_refuses_to_start_unless_enabled() -> None:
    """Test that the opt-in setting is required before any NVML call."""
    fake = FakeNvml({0: A100_CLOCKS})
    with pytest.raises(NvmlDisabledError):
        NvmlBackend([0], enabled=False, nvml=fake)  # type: ignore[arg-type]
    assert fake.initialised == 0


def test_missing_pynvml_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test that without nvidia-ml-py the error names the package to install."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(NvmlUnavailableError, match="nvidia-ml-py"):
        load_pynvml()


def test_set_clock_snaps_to_clocks_every_gpu_supports_and_locks_all() -> None:
    """Test that one snapped clock is locked on every GPU of the instance."""
    fake = FakeNvml({0: A100_CLOCKS, 1: [c for c in A100_CLOCKS if c != 1005]})
    with NvmlBackend([0, 1], enabled=True, nvml=fake) as backend:  # type: ignore[arg-type]
        assert backend.supported_clocks_mhz[0] == 210.0
        assert 1005.0 not in backend.supported_clocks_mhz
        applied = backend.set_clock_mhz(1003.0)
        assert applied in (990.0, 1020.0)
        assert fake.locked == {0: (int(applied),) * 2, 1: (int(applied),) * 2}
        assert backend.clock_mhz() == applied


def test_a_clock_outside_the_supported_range_is_refused_and_nothing_locked() -> None:
    """Test that 50 MHz, 5,000 MHz and NaN raise instead of locking the range's end."""
    fake = FakeNvml({0: A100_CLOCKS})
    with NvmlBackend([0], enabled=True, nvml=fake) as backend:  # type: ignore[arg-type]
        for mhz in (50.0, 5000.0, math.nan):
            with pytest.raises(ClockOutOfRangeError, match="outside the supported"):
                backend.set_clock_mhz(mhz)
        assert fake.locked == {}


def test_close_resets_locked_clocks_and_shuts_nvml_down() -> None:
    """Test that leaving the backend gives the clocks back to the driver."""
    fake = FakeNvml({0: A100_CLOCKS, 1: A100_CLOCKS})
    backend = NvmlBackend([0, 1], enabled=True, nvml=fake)  # type: ignore[arg-type]
    backend.set_clock_mhz(900.0)
    backend.close()
    backend.close()  # idempotent
    assert fake.locked == {}
    assert sorted(fake.resets) == [0, 1]
    assert fake.shutdowns == 1


def test_close_without_locking_does_not_reset() -> None:
    """Test that a read-only session leaves the clocks alone."""
    fake = FakeNvml({0: A100_CLOCKS})
    with NvmlBackend([0], enabled=True, nvml=fake) as backend:  # type: ignore[arg-type]
        assert backend.power_w() == pytest.approx(250.0)
        assert backend.energy_j() == pytest.approx(5000.0)
    assert fake.resets == []
    assert fake.shutdowns == 1


def test_power_and_energy_sum_over_the_instance() -> None:
    """Test that readings add up all GPUs (mW → W, mJ → J)."""
    fake = FakeNvml({0: A100_CLOCKS, 1: A100_CLOCKS})
    with NvmlBackend([0, 1], enabled=True, nvml=fake) as backend:  # type: ignore[arg-type]
        assert backend.power_w() == pytest.approx(501.0)
        assert backend.energy_j() == pytest.approx(10_000.0)


def test_nvml_errors_become_backend_errors_and_still_reset() -> None:
    """Test that a refused lock is reported clearly and clocks are reset on close."""
    fake = FakeNvml({0: A100_CLOCKS}, refuse_lock=True)
    backend = NvmlBackend([0], enabled=True, nvml=fake)  # type: ignore[arg-type]
    with pytest.raises(NvmlBackendError, match="Insufficient Permissions"):
        backend.set_clock_mhz(900.0)
    backend.close()
    assert fake.resets == [0]


def test_failure_to_open_a_gpu_shuts_nvml_down() -> None:
    """Test that a bad GPU index raises and does not leak the NVML session."""
    fake = FakeNvml({0: A100_CLOCKS})
    with pytest.raises(NvmlBackendError, match="no GPU 3"):
        NvmlBackend([0, 3], enabled=True, nvml=fake)  # type: ignore[arg-type]
    assert fake.shutdowns == 1
