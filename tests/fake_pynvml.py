"""A fake ``pynvml`` for the clock tests: the same module-level functions, a fake node's GPUs.

It behaves as the real library does where the clock code depends on it: functions with
pynvml's names and signatures; errors are pynvml's own ``NVMLError`` subclasses built from
NVML's return codes (``NVML_ERROR_NO_PERMISSION`` when the node is not privileged,
``NVML_ERROR_NOT_SUPPORTED`` for a GPU without locked clocks, ``NVML_ERROR_INVALID_ARGUMENT``
for a bad index or a clock outside the GPU's range, ``NVML_ERROR_UNINITIALIZED`` before
``nvmlInit``); ``nvmlDeviceSetGpuLockedClocks`` snaps a clock inside the range to the
nearest supported one, as the driver does; lists come back in the driver's (descending)
order.

The node's state lives in a JSON file (path in :data:`STATE_ENV`), read and written under
an exclusive ``flock``, so a clock agent running as a separate process and the test that
kills it see the same GPUs. A call that changes a clock or power limit is appended to the
state's ``calls``.

Use: ``write_state(path, [a100(), a100()])``, then ``monkeypatch.setenv(STATE_ENV, path)``
(or pass the variable to a subprocess run with ``--nvml-module tests.fake_pynvml``).
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pynvml

__all__ = [
    "NVML_CLOCK_MEM",
    "NVML_CLOCK_SM",
    "STATE_ENV",
    "NVMLError",
    "a100",
    "locked_clocks",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetSupportedGraphicsClocks",
    "nvmlDeviceGetSupportedMemoryClocks",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceResetGpuLockedClocks",
    "nvmlDeviceSetGpuLockedClocks",
    "nvmlDeviceSetPowerManagementLimit",
    "nvmlInit",
    "nvmlShutdown",
    "read_state",
    "write_state",
]

STATE_ENV: Final = "GREENSERVE_FAKE_NVML_STATE"

NVMLError = pynvml.NVMLError
NVML_CLOCK_SM: Final[int] = pynvml.NVML_CLOCK_SM
NVML_CLOCK_MEM: Final[int] = pynvml.NVML_CLOCK_MEM

_initialised = 0
"""nvmlInit calls minus nvmlShutdown calls in this process (NVML counts them the same way)."""


@dataclass(frozen=True, slots=True)
class _Handle:
    index: int


def a100(*, supports_locking: bool = True) -> dict[str, Any]:
    """One A100-SXM4-80GB: graphics clocks 210-1410 MHz in 15 MHz steps, memory 1593 MHz."""
    return {
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_clocks": [1593],
        "graphics_clocks": list(range(1410, 209, -15)),
        "default_mhz": 1410,
        "locked": None,
        "supports_locking": supports_locking,
        "power_mw": 250_000,
        "energy_mj": 5_000_000,
    }


def write_state(path: Path, gpus: list[dict[str, Any]], *, privileged: bool = True) -> None:
    """Create a fake node with ``gpus`` (see :func:`a100`)."""
    with _locked_file(path):
        _save(path, {"privileged": privileged, "gpus": gpus, "calls": []})


def read_state(path: Path) -> dict[str, Any]:
    """The node's state, for a test to inspect."""
    with _locked_file(path):
        return _load(path)


def locked_clocks(path: Path) -> list[tuple[int, int] | None]:
    """Each GPU's locked (min, max) clock, ``None`` where the driver manages it."""
    return [
        None if gpu["locked"] is None else (gpu["locked"][0], gpu["locked"][1])
        for gpu in read_state(path)["gpus"]
    ]


def _state_path() -> Path:
    path = os.environ.get(STATE_ENV)
    if not path:
        raise NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    return Path(path)


@contextlib.contextmanager
def _locked_file(path: Path) -> Iterator[None]:
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _load(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(path.read_text())
    return state


def _save(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)  # a reader never sees half a file


@contextlib.contextmanager
def _node(write: bool = False) -> Iterator[dict[str, Any]]:
    if _initialised <= 0:
        raise NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
    path = _state_path()
    with _locked_file(path):
        state = _load(path)
        yield state
        if write:
            _save(path, state)


def _gpu(state: dict[str, Any], handle: _Handle) -> dict[str, Any]:
    gpu: dict[str, Any] = state["gpus"][handle.index]
    return gpu


def nvmlInit() -> None:
    global _initialised
    with _locked_file(_state_path()):
        _load(_state_path())
    _initialised += 1


def nvmlShutdown() -> None:
    global _initialised
    if _initialised <= 0:
        raise NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
    _initialised -= 1


def nvmlDeviceGetCount() -> int:
    with _node() as state:
        return len(state["gpus"])


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    with _node() as state:
        if not 0 <= index < len(state["gpus"]):
            raise NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return _Handle(index)


def nvmlDeviceGetName(handle: _Handle) -> str:
    with _node() as state:
        name: str = _gpu(state, handle)["name"]
        return name


def nvmlDeviceGetSupportedMemoryClocks(handle: _Handle) -> list[int]:
    with _node() as state:
        return sorted(_gpu(state, handle)["memory_clocks"], reverse=True)


def nvmlDeviceGetSupportedGraphicsClocks(handle: _Handle, memoryClockMHz: int) -> list[int]:
    with _node() as state:
        gpu = _gpu(state, handle)
        if memoryClockMHz not in gpu["memory_clocks"]:
            raise NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return sorted(gpu["graphics_clocks"], reverse=True)


def nvmlDeviceGetClockInfo(handle: _Handle, type: int) -> int:
    with _node() as state:
        gpu = _gpu(state, handle)
        if type == NVML_CLOCK_MEM:
            return int(max(gpu["memory_clocks"]))
        locked = gpu["locked"]
        return int(gpu["default_mhz"] if locked is None else locked[1])


def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:
    with _node() as state:
        return int(_gpu(state, handle)["power_mw"])


def nvmlDeviceGetTotalEnergyConsumption(handle: _Handle) -> int:
    with _node() as state:
        return int(_gpu(state, handle)["energy_mj"])


def _snap(mhz: int, clocks: list[int]) -> int:
    ascending = sorted(clocks)
    index = bisect.bisect_left(ascending, mhz)
    if index == len(ascending):
        return ascending[-1]
    if index == 0 or ascending[index] == mhz:
        return ascending[index]
    below, above = ascending[index - 1], ascending[index]
    return below if mhz - below < above - mhz else above


def _check_may_set(state: dict[str, Any], gpu: dict[str, Any]) -> None:
    if not gpu["supports_locking"]:
        raise NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    if not state["privileged"]:
        raise NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)


def nvmlDeviceSetGpuLockedClocks(handle: _Handle, minGpuClockMHz: int, maxGpuClockMHz: int) -> None:
    with _node(write=True) as state:
        gpu = _gpu(state, handle)
        _check_may_set(state, gpu)
        clocks = gpu["graphics_clocks"]
        low, high = min(clocks), max(clocks)
        if minGpuClockMHz > maxGpuClockMHz or not (
            low <= minGpuClockMHz <= high and low <= maxGpuClockMHz <= high
        ):
            raise NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        time.sleep(float(gpu.get("set_delay_s", 0.0)))  # a slow driver call, if scripted
        gpu["locked"] = [_snap(minGpuClockMHz, clocks), _snap(maxGpuClockMHz, clocks)]
        state["calls"].append(
            f"nvmlDeviceSetGpuLockedClocks({handle.index},{minGpuClockMHz},{maxGpuClockMHz})"
        )


def nvmlDeviceResetGpuLockedClocks(handle: _Handle) -> None:
    with _node(write=True) as state:
        gpu = _gpu(state, handle)
        _check_may_set(state, gpu)
        gpu["locked"] = None
        state["calls"].append(f"nvmlDeviceResetGpuLockedClocks({handle.index})")


def nvmlDeviceSetPowerManagementLimit(handle: _Handle, limit: int) -> None:
    """Recorded so a test can show no clock code ever calls it."""
    with _node(write=True) as state:
        state["calls"].append(f"nvmlDeviceSetPowerManagementLimit({handle.index},{limit})")
