"""Lock the SM clock of NVIDIA GPUs through NVML, with the checks a node operator demands.

What :class:`ClockLocker` does, and nothing else: ``nvmlDeviceSetGpuLockedClocks`` (min = max,
the SM clock the policy chose) and ``nvmlDeviceResetGpuLockedClocks`` (back to the driver's
default clock management). It never touches power limits, memory clocks or application
clocks, and its module protocol below lists no such call.

Checks, in this order, before any GPU is changed:

- the GPU indices exist on this node (``nvmlDeviceGetCount``);
- no GPU of the request was found unusable before (missing privilege,
  ``NVML_ERROR_NO_PERMISSION``, or a GPU without locked clocks, ``NVML_ERROR_NOT_SUPPORTED``):
  such a GPU is refused at once, without calling NVML again, so a node without privilege
  logs one error and then runs at default clocks;
- the clock lies within the range ``nvmlDeviceGetSupportedGraphicsClocks`` lists for every
  GPU of the request at its highest memory clock: a value outside it is refused with the
  range in the reason (not clamped: a policy asking for 3000 MHz has a bug worth seeing);
- a value inside the range but not in the list is snapped to the nearest listed clock
  (ties go up) and the result says so.

A request's GPUs are one instance (tensor parallel), so they get one clock; when NVML fails
on one of them, the GPUs locked by the same request are reset again, so an instance never
runs with split clocks. Every method is blocking (NVML calls take milliseconds); callers on
an event loop run them in an executor.
"""

# ruff: noqa: N802  (method names mirror pynvml's C-style API, which a fake must match)
from __future__ import annotations

import bisect
import contextlib
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

__all__ = [
    "NVML_ERROR_INVALID_ARGUMENT",
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "ClockLocker",
    "ClockModule",
    "ClockRefusedError",
    "GpuClockState",
    "LockResult",
    "count_gpus",
    "nearest_clock",
]

logger = logging.getLogger(__name__)

# NVML's return codes (nvml.h; pynvml exposes them as NVML_ERROR_*). Fixed by the C API.
NVML_ERROR_INVALID_ARGUMENT: Final = 2
NVML_ERROR_NOT_SUPPORTED: Final = 3
NVML_ERROR_NO_PERMISSION: Final = 4

_DISABLING: Final = {
    NVML_ERROR_NO_PERMISSION: (
        "no_permission",
        "NVML refused to change GPU clocks for lack of privilege (NVML_ERROR_NO_PERMISSION): "
        "run the clock agent as root or with CAP_SYS_ADMIN (docs/gpu-clocks.md); the GPUs "
        "stay at the driver's default clocks",
    ),
    NVML_ERROR_NOT_SUPPORTED: (
        "not_supported",
        "this GPU does not support locked clocks (NVML_ERROR_NOT_SUPPORTED; Volta or newer "
        "is needed); it stays at the driver's default clocks",
    ),
}
"""NVML errors after which a GPU is left alone for the rest of the process: reason, log."""


class ClockModule(Protocol):
    """The part of ``pynvml`` the locker uses (what a fake must provide)."""

    NVML_CLOCK_SM: int
    NVMLError: type[Exception]

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int: ...
    def nvmlDeviceGetSupportedMemoryClocks(self, handle: Any) -> Sequence[int]: ...
    def nvmlDeviceGetSupportedGraphicsClocks(
        self, handle: Any, memoryClockMHz: int
    ) -> Sequence[int]: ...
    def nvmlDeviceSetGpuLockedClocks(
        self, handle: Any, minGpuClockMHz: int, maxGpuClockMHz: int
    ) -> None: ...
    def nvmlDeviceResetGpuLockedClocks(self, handle: Any) -> None: ...


class ClockRefusedError(Exception):
    """A clock request that was not applied; ``reason`` is a short code, the text says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class LockResult:
    """A clock applied to every GPU of one request."""

    gpus: tuple[int, ...]
    requested_mhz: float
    applied_mhz: int
    snapped: bool
    """True when ``applied_mhz`` is the nearest supported clock, not the one asked for."""
    took_s: float
    """Time of the NVML calls that changed the clocks."""

    @property
    def message(self) -> str:
        """What happened, in words."""
        if self.snapped:
            return (
                f"{self.requested_mhz:g} MHz is not a supported clock; "
                f"locked at the nearest, {self.applied_mhz} MHz"
            )
        return f"locked at {self.applied_mhz} MHz"


@dataclass(frozen=True, slots=True)
class GpuClockState:
    """One GPU as the locker sees it."""

    index: int
    sm_clock_mhz: int | None
    """The SM clock NVML reads now (``None`` when the read failed)."""
    locked_mhz: int | None
    """The clock this process locked it at (``None``: default clock management)."""
    supported_min_mhz: int | None
    supported_max_mhz: int | None
    unavailable: str
    """Why the GPU is left alone (``no_permission``, ``not_supported``); empty when usable."""


def count_gpus(nvml: ClockModule) -> int:
    """How many GPUs NVML sees on this node (read-only: init, count, shutdown).

    Raises:
        ClockRefusedError: NVML cannot start (reason ``nvml_unavailable``).
    """
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise ClockRefusedError("nvml_unavailable", f"NVML could not start: {exc}") from exc
    try:
        return int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError as exc:
        raise ClockRefusedError("nvml_unavailable", f"NVML could not count GPUs: {exc}") from exc
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def nearest_clock(mhz: float, supported: Sequence[int]) -> int:
    """The clock of ``supported`` (ascending, not empty) nearest ``mhz``; ties go up."""
    index = bisect.bisect_left(supported, mhz)
    if index == 0:
        return supported[0]
    if index == len(supported):
        return supported[-1]
    below, above = supported[index - 1], supported[index]
    return below if mhz - below < above - mhz else above


class ClockLocker:
    """Locks and resets the SM clocks of one node's GPUs; one NVML session for its life."""

    def __init__(self, nvml: ClockModule) -> None:
        """Start NVML and count the node's GPUs.

        Args:
            nvml: ``pynvml`` (or a fake with its functions); the caller imports it.

        Raises:
            ClockRefusedError: when NVML cannot start (reason ``nvml_unavailable``).
        """
        self._nvml = nvml
        try:
            nvml.nvmlInit()
            self._count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            raise ClockRefusedError("nvml_unavailable", f"NVML could not start: {exc}") from exc
        self._open = True
        self._handles: dict[int, Any] = {}
        self._supported: dict[int, tuple[int, ...]] = {}
        self._locked: dict[int, int] = {}
        self._unavailable: dict[int, str] = {}
        self._logged: set[str] = set()

    @property
    def gpu_count(self) -> int:
        """GPUs on this node."""
        return self._count

    @property
    def locked(self) -> dict[int, int]:
        """GPUs this process locked, and their clock."""
        return dict(self._locked)

    def _handle(self, index: int) -> Any:
        handle = self._handles.get(index)
        if handle is None:
            handle = self._handles[index] = self._nvml.nvmlDeviceGetHandleByIndex(index)
        return handle

    def _check_indices(self, gpus: Sequence[int]) -> tuple[int, ...]:
        if not gpus:
            raise ClockRefusedError("bad_request", "name at least one GPU")
        bad = [i for i in gpus if not 0 <= i < self._count]
        if bad:
            raise ClockRefusedError(
                "unknown_gpu",
                f"no GPU {', '.join(map(str, bad))} on this node ({self._count} GPUs: "
                f"indices 0-{self._count - 1})",
            )
        return tuple(dict.fromkeys(gpus))

    def _check_available(self, gpus: Sequence[int]) -> None:
        for index in gpus:
            reason = self._unavailable.get(index)
            if reason:
                raise ClockRefusedError(reason, f"GPU {index}: {_DISABLING_BY_REASON[reason]}")

    def _disable_on(self, index: int, exc: Exception, action: str) -> ClockRefusedError:
        """Turn an NVML error into a refusal; mark the GPU unusable for the errors that mean it."""
        code = getattr(exc, "value", None)
        if code in _DISABLING:
            reason, text = _DISABLING[code]
            self._unavailable[index] = reason
            if reason not in self._logged:  # one clear error per cause, not one per command
                self._logged.add(reason)
                logger.error("GPU %d: %s", index, text)
            return ClockRefusedError(reason, f"GPU {index}: {text}")
        if code == NVML_ERROR_INVALID_ARGUMENT:
            return ClockRefusedError(
                "invalid_argument", f"GPU {index}: NVML could not {action}: {exc}"
            )
        return ClockRefusedError("nvml_error", f"GPU {index}: NVML could not {action}: {exc}")

    def supported_clocks(self, index: int) -> tuple[int, ...]:
        """Graphics clocks GPU ``index`` supports at its highest memory clock, ascending.

        Raises:
            ClockRefusedError: unknown GPU, or NVML failed.
        """
        self._check_indices([index])
        cached = self._supported.get(index)
        if cached is not None:
            return cached
        try:
            handle = self._handle(index)
            memory = max(self._nvml.nvmlDeviceGetSupportedMemoryClocks(handle))
            clocks = self._nvml.nvmlDeviceGetSupportedGraphicsClocks(handle, memory)
        except self._nvml.NVMLError as exc:
            raise self._disable_on(index, exc, "list supported clocks") from exc
        if not clocks:
            raise ClockRefusedError("not_supported", f"GPU {index} lists no graphics clocks")
        supported = self._supported[index] = tuple(sorted({int(c) for c in clocks}))
        return supported

    def _common_clocks(self, gpus: Sequence[int]) -> tuple[int, ...]:
        common: set[int] | None = None
        for index in gpus:
            clocks = set(self.supported_clocks(index))
            common = clocks if common is None else common & clocks
        if not common:
            raise ClockRefusedError(
                "not_supported", f"GPUs {', '.join(map(str, gpus))} share no supported clock"
            )
        return tuple(sorted(common))

    def lock(self, gpus: Sequence[int], mhz: float) -> LockResult:
        """Lock every GPU of ``gpus`` at the supported clock ``mhz`` (or the nearest one).

        Raises:
            ClockRefusedError: the request fails a check or NVML refused; nothing stays
                changed by this call.
        """
        indices = self._check_indices(gpus)
        self._check_available(indices)
        supported = self._common_clocks(indices)
        low, high = supported[0], supported[-1]
        if not math.isfinite(mhz) or not low <= mhz <= high:
            raise ClockRefusedError(
                "out_of_range",
                f"{mhz:g} MHz is outside the supported range {low}-{high} MHz of GPU "
                f"{', '.join(map(str, indices))}",
            )
        applied = nearest_clock(mhz, supported)
        changed: list[int] = []
        start = time.perf_counter()
        for index in indices:
            try:
                self._nvml.nvmlDeviceSetGpuLockedClocks(self._handle(index), applied, applied)
            except self._nvml.NVMLError as exc:
                refused = self._disable_on(index, exc, f"lock the clock at {applied} MHz")
                self._undo(changed)
                raise refused from exc
            changed.append(index)
            self._locked[index] = applied
        took = time.perf_counter() - start
        return LockResult(indices, mhz, applied, applied != mhz, took)

    def _undo(self, gpus: Sequence[int]) -> None:
        stuck: list[str] = []
        for index in gpus:
            try:
                self.reset([index])
            except ClockRefusedError as exc:
                stuck.append(f"GPU {index}: {exc}")
        if stuck:
            logger.error("could not reset after a failed lock: %s", "; ".join(stuck))

    def reset(self, gpus: Sequence[int]) -> float:
        """Give ``gpus`` back to the driver's default clocks; return the NVML time taken.

        Raises:
            ClockRefusedError: unknown GPU, or NVML refused (the GPU is then left alone).
        """
        indices = self._check_indices(gpus)
        self._check_available(indices)
        start = time.perf_counter()
        for index in indices:
            try:
                self._nvml.nvmlDeviceResetGpuLockedClocks(self._handle(index))
            except self._nvml.NVMLError as exc:
                raise self._disable_on(index, exc, "reset the locked clock") from exc
            self._locked.pop(index, None)
        return time.perf_counter() - start

    def reset_all(self) -> dict[int, str]:
        """Reset every GPU of the node; return the GPUs that could not be, with the reason.

        At start-up (a crashed agent may have left GPUs locked) and at exit. A GPU that
        refuses is marked unusable, so later lock requests are refused without retrying.
        """
        failed: dict[int, str] = {}
        for index in range(self._count):
            if index in self._unavailable:
                failed[index] = self._unavailable[index]
                continue
            try:
                self.reset([index])
            except ClockRefusedError as exc:
                failed[index] = exc.reason
        return failed

    def states(self, gpus: Sequence[int] = ()) -> list[GpuClockState]:
        """The clock state of ``gpus`` (default: every GPU of the node)."""
        indices = self._check_indices(gpus) if gpus else tuple(range(self._count))
        out = []
        for index in indices:
            try:
                clock: int | None = int(
                    self._nvml.nvmlDeviceGetClockInfo(self._handle(index), self._nvml.NVML_CLOCK_SM)
                )
            except self._nvml.NVMLError:
                clock = None
            try:
                supported: tuple[int, ...] = self.supported_clocks(index)
            except ClockRefusedError:
                supported = ()
            out.append(
                GpuClockState(
                    index=index,
                    sm_clock_mhz=clock,
                    locked_mhz=self._locked.get(index),
                    supported_min_mhz=supported[0] if supported else None,
                    supported_max_mhz=supported[-1] if supported else None,
                    unavailable=self._unavailable.get(index, ""),
                )
            )
        return out

    def close(self) -> dict[int, str]:
        """Reset every GPU and shut NVML down (idempotent); return the GPUs not reset."""
        if not self._open:
            return {}
        try:
            return self.reset_all()
        finally:
            self._open = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                logger.warning("NVML did not shut down cleanly: %s", exc)


_DISABLING_BY_REASON: Final = dict(_DISABLING.values())
