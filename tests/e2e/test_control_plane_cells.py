"""``greenserve bench control-plane --cells --clients``: independent stacks on one NATS and
one Redis, loaded by several client processes."""

from __future__ import annotations

import pytest

from greenserve.bench.control_plane import _spec, _sweep

pytestmark = pytest.mark.connected


def test_two_cells_share_the_servers_and_each_answers_the_requests_sent_to_it() -> None:
    """Test that a second cell joins the first's servers under its own namespace, that the
    requests split between them, sent by two client processes, all complete (a request
    published to a cell's ingress can only be answered by that cell's request path and
    workers, and reaches only the client process that sent it), and that the step reports
    each cell's processes under its own name while the servers are counted once."""
    run = _sweep(_spec(2, "colocated"), [40.0], 2.0, hops=True, cells=2, clients=2)
    step = run["steps"][0]
    assert step["requests"] > 0
    assert step["completed"] == step["requests"]
    processes = step["cpu_cores_by_process"]
    assert {"requestpath", "worker-0", "cp1/requestpath", "cp1/worker-0"} <= set(processes)
    assert "worker-1" not in processes  # two workers split one per cell
    assert sum(name.endswith("nats") for name in processes) == 1
    assert step["hops"]["requests"] == step["requests"]  # every stamp came back
    assert step["loadgen_cpu_cores"] > 0.0  # the client processes' CPU is counted


def test_more_cells_than_workers_is_refused() -> None:
    """Test that a cell without a worker is refused before anything starts."""
    with pytest.raises(ValueError, match="3 cells"):
        _sweep(_spec(2, "colocated"), [40.0], 1.0, cells=3)
