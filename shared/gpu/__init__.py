"""Reading real GPUs: power, energy and clocks through NVML (read-only; see :mod:`.nvml`)."""

from shared.gpu.nvml import (
    DeviceReading,
    NvmlReader,
    NvmlReadError,
    NvmlUnavailableError,
    ReaderModule,
    load_nvml,
)

__all__ = [
    "DeviceReading",
    "NvmlReadError",
    "NvmlReader",
    "NvmlUnavailableError",
    "ReaderModule",
    "load_nvml",
]
