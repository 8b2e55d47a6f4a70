"""Clock commands outside the GPU's supported range are refused, not snapped (issue 29).

Before, a worker on the simulated engine clamped any commanded clock to its GPU's range:
50 MHz ran the GPU at its 210 MHz floor and 5,000 MHz at its maximum, both ``accepted``.
"""

from __future__ import annotations

import math

import pytest

from proto.messages import ClockCommand
from services.worker.clock_range import CLOCK_OUT_OF_RANGE
from services.worker.factory import build_backend
from services.worker.service import WorkerShim
from shared.counters import ERRORS
from shared.engine.hardware import gpu_spec
from shared.lifecycle import service_context
from shared.servers import ServerProcess
from tests.factories import connected_settings

pytestmark = pytest.mark.connected


def _refused() -> float:
    value: float = ERRORS.labels("worker", CLOCK_OUT_OF_RANGE)._value.get()
    return value


async def test_a_clock_outside_the_supported_range_is_refused_with_its_reason(
    nats_server: ServerProcess, redis_server: ServerProcess, namespace: str
) -> None:
    """Test that 50 MHz, 5,000 MHz and NaN are refused with a reason naming the range and
    counted, the clock left where it was, while 1,001 MHz is accepted at its nearest step."""
    settings = connected_settings(namespace, nats_server, redis_server)
    spec = gpu_spec(settings.worker.gpu)
    async with service_context("worker", settings) as ctx:
        shim = WorkerShim(ctx, build_backend(ctx.settings))
        worker = settings.worker.worker_id
        before_mhz = shim.backend.snapshot().clock_mhz
        before = _refused()
        for mhz in (50.0, 5000.0, math.nan):
            reply = await shim.on_clock(
                ClockCommand(worker_id=worker, clock_mhz=mhz, issued_by="dvfs"),
                None,  # type: ignore[arg-type]
            )
            assert not reply.accepted
            assert f"{spec.min_clock_mhz:g}-{spec.max_clock_mhz:g} MHz" in reply.reason
            assert reply.applied_mhz == before_mhz
        assert _refused() == before + 3
        assert shim.backend.snapshot().clock_mhz == before_mhz
        ok = await shim.on_clock(
            ClockCommand(worker_id=worker, clock_mhz=1001.0, issued_by="dvfs"),
            None,  # type: ignore[arg-type]
        )
        assert ok.accepted
        assert ok.applied_mhz == spec.snap_clock(1001.0)
