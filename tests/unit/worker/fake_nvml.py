"""A fake ``pynvml`` module object: scripted readings, and a log of every call made."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FakeGpu", "FakeNvml", "FakeNvmlError"]


class FakeNvmlError(Exception):
    """Stands in for ``pynvml.NVMLError``."""


@dataclass
class FakeGpu:
    """One device's scripted state (NVML units: mW, mJ, MHz)."""

    power_mw: int = 100_000
    energy_mj: int | None = 5_000_000
    """``None``: the device has no energy counter (pre-Volta)."""
    sm_mhz: int = 1410
    memory_clocks: tuple[int, ...] = (1593,)
    graphics_clocks: tuple[int, ...] = (1410, 1395, 1380)


@dataclass
class FakeNvml:
    """The read-only NVML surface; refuses and records any other call."""

    gpus: dict[int, FakeGpu]
    calls: list[str] = field(default_factory=list)
    NVML_CLOCK_SM: int = 1
    NVMLError: type[Exception] = FakeNvmlError
    initialised: bool = False

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")
        self.initialised = False

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self.calls.append("nvmlDeviceGetHandleByIndex")
        if index not in self.gpus:
            raise FakeNvmlError(f"no GPU {index}")
        return self.gpus[index]

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        self.calls.append("nvmlDeviceGetPowerUsage")
        return handle.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeGpu) -> int:
        self.calls.append("nvmlDeviceGetTotalEnergyConsumption")
        if handle.energy_mj is None:
            raise FakeNvmlError("Not Supported")
        return handle.energy_mj

    def nvmlDeviceGetClockInfo(self, handle: FakeGpu, clock_type: int) -> int:
        self.calls.append("nvmlDeviceGetClockInfo")
        assert clock_type == self.NVML_CLOCK_SM
        return handle.sm_mhz

    def nvmlDeviceGetSupportedMemoryClocks(self, handle: FakeGpu) -> Sequence[int]:
        self.calls.append("nvmlDeviceGetSupportedMemoryClocks")
        return handle.memory_clocks

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: FakeGpu, memory: int) -> Sequence[int]:
        self.calls.append("nvmlDeviceGetSupportedGraphicsClocks")
        assert memory == max(handle.memory_clocks)
        return handle.graphics_clocks

    def __getattr__(self, name: str) -> Any:
        # Any setter (nvmlDeviceSet*, Reset*) is a GPU change: fail loudly.
        raise AssertionError(f"reader called {name}, which is not a read-only query")
