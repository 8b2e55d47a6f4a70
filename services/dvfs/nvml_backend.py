"""Clock backend for real NVIDIA GPUs through NVML (``pynvml`` from ``nvidia-ml-py``).

One backend drives one instance: all of its GPUs get the same locked SM clock (FREESH
§2.3, throttLL'eM §3.3). Clocks are snapped to the graphics clocks NVML lists as supported
by every GPU of the instance at its highest memory clock; the memory clock is never
changed. ``nvmlDeviceSetGpuLockedClocks`` needs root (or admin clock permission); locked
clocks are reset when the backend closes, so a crashed or stopped agent does not leave
GPUs throttled. Keeping one NVML session open avoids the 50–80 ms of re-launching
``nvidia-smi`` per change (DynamoLLM §4.3).

The backend is opt-in (``enabled=True`` must be passed, from a setting) and tests inject a
fake module object through ``nvml=``; the simulated engine is the other backend.
"""

# ruff: noqa: N802  (method names mirror pynvml's C-style API, which a fake must match)
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any, Protocol, Self, cast

from services.dvfs.controller import snap_clock
from shared.gpu.nvml import NvmlReader, NvmlReadError, ReaderModule, load_nvml
from shared.gpu.nvml import NvmlUnavailableError as ReaderUnavailableError

__all__ = [
    "ClockOutOfRangeError",
    "NvmlBackend",
    "NvmlBackendError",
    "NvmlDisabledError",
    "NvmlModule",
    "NvmlUnavailableError",
    "load_pynvml",
]


class NvmlBackendError(RuntimeError):
    """NVML refused or failed an operation."""


class NvmlUnavailableError(NvmlBackendError, ImportError):
    """``pynvml`` is not installed."""


class NvmlDisabledError(NvmlBackendError):
    """NVML clock control was not enabled by the settings."""


class ClockOutOfRangeError(NvmlBackendError, ValueError):
    """A clock outside the instance's supported range: refused, never clamped to an end
    (the worker refuses such a ``ClockCommand`` too, ``services/worker/clock_range.py``)."""


class NvmlModule(ReaderModule, Protocol):
    """The part of ``pynvml`` the backend uses: the reader's queries plus clock locking."""

    NVML_CLOCK_MEM: int

    def nvmlDeviceSetGpuLockedClocks(self, handle: Any, min_mhz: int, max_mhz: int) -> None: ...
    def nvmlDeviceResetGpuLockedClocks(self, handle: Any) -> None: ...


def load_pynvml() -> NvmlModule:
    """Import ``pynvml`` (through the shared reader's loader).

    Raises:
        NvmlUnavailableError: when it is not installed.
    """
    try:
        module = load_nvml()
    except ReaderUnavailableError as exc:
        raise NvmlUnavailableError(
            "NVML clock control needs the optional package nvidia-ml-py "
            "(pip install nvidia-ml-py); the simulator backend needs nothing"
        ) from exc
    return cast(NvmlModule, module)


@contextlib.contextmanager
def _as_backend_error(nvml: NvmlModule, action: str) -> Iterator[None]:
    """Report NVML and reader failures as :class:`NvmlBackendError` naming the action."""
    try:
        yield
    except NvmlReadError as exc:
        raise NvmlBackendError(str(exc)) from exc
    except nvml.NVMLError as exc:
        raise NvmlBackendError(f"NVML could not {action}: {exc}") from exc


class NvmlBackend:
    """Reads power, energy and clocks of one instance's GPUs and locks their SM clock.

    Reading is :class:`shared.gpu.nvml.NvmlReader`'s (one NVML session, shared); this class
    adds only the clock lock and its reset.
    """

    def __init__(
        self, gpu_indices: Sequence[int], *, enabled: bool, nvml: NvmlModule | None = None
    ) -> None:
        """Open NVML and the GPUs of the instance.

        Args:
            gpu_indices: NVML indices of the instance's GPUs (one clock for all).
            enabled: the opt-in setting; ``False`` refuses to touch any GPU.
            nvml: the NVML module (default: import ``pynvml``); tests pass a fake.

        Raises:
            NvmlDisabledError: when ``enabled`` is false.
            NvmlUnavailableError: when ``pynvml`` is missing.
            NvmlBackendError: when NVML fails or no clock is common to all GPUs.
        """
        if not enabled:
            raise NvmlDisabledError(
                "NVML clock control is opt-in; enable it in the dvfs settings on hosts "
                "where the agent may lock GPU clocks"
            )
        if not gpu_indices:
            raise ValueError("an instance needs at least one GPU")
        self._nvml = nvml if nvml is not None else load_pynvml()
        self._locked = False
        with _as_backend_error(self._nvml, "open GPUs"):
            self._reader = NvmlReader(gpu_indices, nvml=self._nvml)
        try:
            with _as_backend_error(self._nvml, "list supported clocks"):
                self._clocks = self._reader.supported_clocks_mhz()
        except BaseException:
            self.close()
            raise
        if not self._clocks:
            self.close()
            raise NvmlBackendError("the instance's GPUs share no supported graphics clock")

    @property
    def supported_clocks_mhz(self) -> tuple[float, ...]:
        """Graphics clocks every GPU of the instance supports, ascending."""
        return self._clocks

    @property
    def locked(self) -> bool:
        """Whether this backend has locked the clocks (and will reset them on close)."""
        return self._locked

    def power_w(self) -> float:
        """Current power of the instance (all GPUs), in watts."""
        with _as_backend_error(self._nvml, "read power"):
            return self._reader.power_w()

    def energy_j(self) -> float:
        """Energy counter of the instance (sum over GPUs since driver load), in joules."""
        with _as_backend_error(self._nvml, "read energy"):
            return self._reader.energy_j()

    def clock_mhz(self) -> float:
        """Current SM clock (the lowest over the instance's GPUs)."""
        with _as_backend_error(self._nvml, "read clocks"):
            return self._reader.sm_clock_mhz()

    def set_clock_mhz(self, mhz: float) -> float:
        """Lock every GPU of the instance to the supported clock nearest ``mhz``.

        Returns:
            The clock applied.

        Raises:
            ClockOutOfRangeError: ``mhz`` is outside the supported clocks (or no number).
            NvmlBackendError: when NVML refuses (usually: not running as root).
        """
        low, high = min(self._clocks), max(self._clocks)
        if not low <= mhz <= high:  # NaN included
            raise ClockOutOfRangeError(f"{mhz:g} MHz is outside the supported {low:g}-{high:g} MHz")
        applied = snap_clock(mhz, self._clocks)
        with _as_backend_error(self._nvml, f"lock clocks at {applied:.0f} MHz"):
            for handle in self._reader.handles:
                self._locked = True  # reset on close even if a later GPU fails
                self._nvml.nvmlDeviceSetGpuLockedClocks(handle, int(applied), int(applied))
        return applied

    def reset_clocks(self) -> None:
        """Give the GPUs back to the driver's default clock management."""
        with _as_backend_error(self._nvml, "reset clocks"):
            for handle in self._reader.handles:
                self._nvml.nvmlDeviceResetGpuLockedClocks(handle)
        self._locked = False

    def close(self) -> None:
        """Reset locked clocks and shut NVML down (idempotent)."""
        try:
            if self._locked:
                self.reset_clocks()
        finally:
            with _as_backend_error(self._nvml, "shut NVML down"):
                self._reader.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
