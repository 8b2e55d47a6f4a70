"""Read power, energy and clocks of NVIDIA GPUs through NVML (``pynvml`` from ``nvidia-ml-py``).

Read-only by construction: the module protocol below lists only NVML queries, so no
clock or any other GPU setting can be changed through a reader (clock locking belongs to
the dvfs agent and is opt-in there). Units follow NVML's: power in mW, energy in mJ since
the driver loaded (``nvmlDeviceGetTotalEnergyConsumption``, Volta and newer), clocks in
MHz; the reader converts to W, J and MHz. Where a GPU lacks the energy counter, the
reader integrates power readings over time instead (trapezoid rule), so the counter it
reports is always monotone.

``pynvml`` is optional (``pip install nvidia-ml-py``, the ``gpu`` extra); tests pass a
fake module object through ``nvml=``.
"""

# ruff: noqa: N802  (method names mirror pynvml's C-style API, which a fake must match)
from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar, cast

__all__ = [
    "DeviceReading",
    "NvmlReadError",
    "NvmlReader",
    "NvmlUnavailableError",
    "ReaderModule",
    "load_nvml",
]

T = TypeVar("T")


class NvmlReadError(RuntimeError):
    """NVML failed a query."""


class NvmlUnavailableError(NvmlReadError, ImportError):
    """``pynvml`` is not installed."""


class ReaderModule(Protocol):
    """The read-only part of ``pynvml`` a reader uses (what a fake must provide)."""

    NVML_CLOCK_SM: int
    NVMLError: type[Exception]

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int: ...
    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int: ...
    def nvmlDeviceGetSupportedMemoryClocks(self, handle: Any) -> Sequence[int]: ...
    def nvmlDeviceGetSupportedGraphicsClocks(
        self, handle: Any, memory_clock_mhz: int
    ) -> Sequence[int]: ...


def load_nvml() -> ReaderModule:
    """Import ``pynvml``.

    Raises:
        NvmlUnavailableError: when it is not installed.
    """
    try:
        module = importlib.import_module("pynvml")
    except ImportError as exc:
        raise NvmlUnavailableError(
            "reading GPU power needs the optional package nvidia-ml-py "
            "(pip install nvidia-ml-py, or the 'gpu' extra); without it the worker "
            "reports simulated or zero power"
        ) from exc
    return cast(ReaderModule, module)


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """One GPU at one instant."""

    index: int
    power_w: float
    energy_j: float
    """Energy counter (since driver load, or since the reader opened when integrated)."""
    sm_clock_mhz: float


class NvmlReader:
    """Reads the GPUs with the given NVML indices; close it (or use ``with``) when done."""

    def __init__(
        self,
        gpu_indices: Sequence[int],
        *,
        nvml: ReaderModule | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Open NVML and the GPUs.

        Args:
            gpu_indices: NVML device indices (all GPUs of one instance).
            nvml: the NVML module (default: import ``pynvml``); tests pass a fake.
            clock: monotonic seconds, for integrating power where no energy counter exists.

        Raises:
            ValueError: for no indices.
            NvmlUnavailableError: when ``pynvml`` is missing.
            NvmlReadError: when NVML cannot start or a GPU cannot be opened.
        """
        if not gpu_indices:
            raise ValueError("give at least one GPU index")
        self._nvml = nvml if nvml is not None else load_nvml()
        self._indices = tuple(gpu_indices)
        self._clock = clock
        self._open = False
        self._call("initialise NVML", self._nvml.nvmlInit)
        self._open = True
        try:
            self._handles = [
                self._call(f"open GPU {i}", self._nvml.nvmlDeviceGetHandleByIndex, i)
                for i in self._indices
            ]
            self._has_counter = [self._probe_counter(h) for h in self._handles]
        except BaseException:
            self.close()
            raise
        # (time, power W, integrated J) of the previous reading, per GPU without a counter.
        self._integrated: list[tuple[float, float, float] | None] = [None] * len(self._handles)

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        """NVML indices read."""
        return self._indices

    @property
    def handles(self) -> tuple[Any, ...]:
        """Device handles, for the dvfs agent's clock backend that shares this NVML session."""
        return tuple(self._handles)

    def _call(self, action: str, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            raise NvmlReadError(f"NVML could not {action}: {exc}") from exc

    def _probe_counter(self, handle: Any) -> bool:
        try:
            self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except self._nvml.NVMLError:
            return False
        return True

    def device(self, position: int) -> DeviceReading:
        """Read the GPU at ``position`` in ``gpu_indices``."""
        handle = self._handles[position]
        power_w = self._call("read power", self._nvml.nvmlDeviceGetPowerUsage, handle) / 1000.0
        if self._has_counter[position]:
            energy_mj = self._call(
                "read energy", self._nvml.nvmlDeviceGetTotalEnergyConsumption, handle
            )
            energy_j = energy_mj / 1000.0
        else:
            energy_j = self._integrate(position, power_w)
        clock = self._call(
            "read the SM clock", self._nvml.nvmlDeviceGetClockInfo, handle, self._nvml.NVML_CLOCK_SM
        )
        return DeviceReading(self._indices[position], power_w, energy_j, float(clock))

    def _integrate(self, position: int, power_w: float) -> float:
        now = self._clock()
        previous = self._integrated[position]
        energy = 0.0
        if previous is not None:
            t_prev, p_prev, e_prev = previous
            energy = e_prev + 0.5 * (p_prev + power_w) * max(0.0, now - t_prev)
        self._integrated[position] = (now, power_w, energy)
        return energy

    def read(self) -> tuple[DeviceReading, ...]:
        """Read every GPU."""
        return tuple(self.device(i) for i in range(len(self._handles)))

    def power_w(self) -> float:
        """Power of all GPUs together, in watts."""
        return sum(r.power_w for r in self.read())

    def energy_j(self) -> float:
        """Energy counter of all GPUs together, in joules."""
        return sum(r.energy_j for r in self.read())

    def sm_clock_mhz(self) -> float:
        """SM clock, the lowest over the GPUs (the one that paces a TP group)."""
        return min(r.sm_clock_mhz for r in self.read())

    def supported_clocks_mhz(self) -> tuple[float, ...]:
        """Graphics clocks every GPU supports at its highest memory clock, ascending."""
        common: set[int] | None = None
        for handle in self._handles:
            memory = max(
                self._call(
                    "list memory clocks", self._nvml.nvmlDeviceGetSupportedMemoryClocks, handle
                )
            )
            clocks = set(
                self._call(
                    "list graphics clocks",
                    self._nvml.nvmlDeviceGetSupportedGraphicsClocks,
                    handle,
                    memory,
                )
            )
            common = clocks if common is None else common & clocks
        return tuple(float(c) for c in sorted(common or ()))

    def close(self) -> None:
        """Shut NVML down (idempotent)."""
        if not self._open:
            return
        self._open = False
        self._call("shut NVML down", self._nvml.nvmlShutdown)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
