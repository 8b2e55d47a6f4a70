"""Cells: independent stacks on one NATS and one Redis, in ``greenserve bench
control-plane --cells --clients`` (loaded by several client processes) and ``greenserve up
--cells``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from greenserve.bench.control_plane.run import spec_for, sweep
from greenserve.cli import main
from greenserve.local import alive, load_state

pytestmark = pytest.mark.connected


def test_two_cells_share_the_servers_and_each_answers_the_requests_sent_to_it() -> None:
    """Test that a second cell joins the first's servers under its own namespace, that the
    requests split between them, sent by two client processes, all complete (a request
    published to a cell's ingress can only be answered by that cell's request path and
    workers, and reaches only the client process that sent it), and that the step reports
    each cell's processes under its own name while the servers are counted once."""
    run = sweep(spec_for(2, "colocated"), [40.0], 2.0, hops=True, cells=2, clients=2)
    step = run["steps"][0]
    assert step["requests"] > 0
    assert step["completed"] == step["requests"]
    processes = step["cpu_cores_by_process"]
    assert {"requestpath", "worker-0", "cp1/requestpath", "cp1/worker-0"} <= set(processes)
    assert "worker-1" not in processes  # two workers split one per cell
    assert sum(name.endswith("nats") for name in processes) == 1
    assert step["hops"]["requests"] == step["requests"]  # every stamp came back
    assert step["loadgen_cpu_cores"] > 0.0  # the client processes' CPU is counted
    assert step["steal_cores"] >= 0.0
    # The machine was busy at least as long as the processes it ran (ticks round per process).
    assert step["other_cores"] > -0.2


def test_more_cells_than_workers_is_refused() -> None:
    """Test that a cell without a worker is refused before anything starts."""
    with pytest.raises(ValueError, match="3 cells"):
        sweep(spec_for(2, "colocated"), [40.0], 1.0, cells=3)


def test_up_starts_cells_on_one_set_of_servers_and_down_stops_them_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Test ``greenserve up --cells 2``: the second cell joins the first's servers under
    ``ns1`` with its share of the workers and the first's model-time origin, answers on its
    own OpenAI address, the first cell's address spreads requests over both cells, the
    second shows in ``status``, and ``down`` stops both, servers last."""
    state_dir = tmp_path / "gs"
    namespace = f"cells{uuid.uuid4().hex[:6]}"
    argv = ["--workers", "2", "--regions", "PJM", "--speedup", "20", "--cells", "2"]
    assert main(["up", *argv, "--namespace", namespace, "--state-dir", str(state_dir)]) == 0
    first = load_state(state_dir)
    try:
        assert len(first.cells) == 1
        second = load_state(Path(first.cells[0]))
        assert (second.nats_url, second.redis_url) == (first.nats_url, first.redis_url)
        assert second.namespace == f"{namespace}1"
        assert (first.workers, second.workers) == (1, 1)
        assert second.origin_wall_s == first.origin_wall_s
        for url in (second.gateway_url, first.gateway_url, first.gateway_url):
            assert _complete(f"{url}/v1/completions") == 3
        # Each gateway fronts both cells; idle, the first one's two requests went one each.
        # Under `up` each process serves /metrics on its own port, the gateway's too.
        with urllib.request.urlopen(first.metrics["gateway"], timeout=10) as response:
            metrics = response.read().decode()
        for cell in (namespace, second.namespace):
            assert f'greenserve_gateway_cell_requests_total{{cell="{cell}"}} 1.0' in metrics
        # Every service process times its collector's pauses (shared/gc_pauses.py).
        assert 'greenserve_gc_pause_seconds_count{generation="2",service="gateway"}' in metrics
        capsys.readouterr()
        assert main(["status", "--json", "--state-dir", str(state_dir)]) == 0
        cells = json.loads(capsys.readouterr().out)["cells"]
        assert [(c["namespace"], c["running"]) for c in cells] == [
            (second.namespace, len(second.pids) + len(second.server_pids))
        ]
    finally:
        assert main(["down", "--state-dir", str(state_dir)]) == 0
    pids = [*first.pids.values(), *first.server_pids.values(), *second.pids.values()]
    assert not any(alive(pid) for pid in pids)
    assert not (Path(first.cells[0]) / "stack.json").exists()


def _complete(url: str, key_file: Path | None = None) -> int:
    body = {"model": "llama-3-8b", "prompt": "hello", "max_tokens": 3}
    headers = {"content-type": "application/json"}
    if key_file is not None:  # a secured stack's API asks for the key it issued
        headers["Authorization"] = f"Bearer {key_file.read_text().strip()}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        tokens: int = json.load(response)["usage"]["completion_tokens"]
    return tokens


def test_up_secures_cells_each_on_its_own_servers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Test ``greenserve up --secure --cells 2``: each cell gets its own secured NATS and
    Redis (a secured server holds one stack's users), answers on its own address, its
    gateway fronts only its own cell, and ``down`` stops both cells and all four servers."""
    state_dir = tmp_path / "gs"
    namespace = f"sc{uuid.uuid4().hex[:6]}"
    argv = ["--workers", "2", "--regions", "PJM", "--speedup", "20", "--cells", "2", "--secure"]
    assert main(["up", *argv, "--namespace", namespace, "--state-dir", str(state_dir)]) == 0
    first = load_state(state_dir)
    try:
        cell_dir = Path(first.cells[0])
        second = load_state(cell_dir)
        assert first.secure
        assert second.secure
        assert set(first.server_pids.values()).isdisjoint(second.server_pids.values())
        assert len(second.server_pids) == 2
        assert first.nats_url != second.nats_url
        for url, folder in ((first.gateway_url, state_dir), (second.gateway_url, cell_dir)):
            with pytest.raises(urllib.error.HTTPError, match="401"):
                _complete(f"{url}/v1/completions")
            assert _complete(f"{url}/v1/completions", folder / "secrets" / "api-key") == 3
        # Under `up` each process serves /metrics on its own port, the gateway's too.
        with urllib.request.urlopen(first.metrics["gateway"], timeout=10) as response:
            metrics = response.read().decode()
        assert f'greenserve_gateway_cell_requests_total{{cell="{namespace}"}} 1.0' in metrics
        assert second.namespace not in metrics  # no front door over separate servers
        assert "of cell 1 (its own servers)" in capsys.readouterr().err
    finally:
        assert main(["down", "--state-dir", str(state_dir)]) == 0
    pids = [*first.pids.values(), *first.server_pids.values()]
    pids += [*second.pids.values(), *second.server_pids.values()]
    assert not any(alive(pid) for pid in pids)


def test_the_bench_compares_the_nats_and_http_entries_in_one_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Test ``bench control-plane --entry both``: the same steps through the JetStream
    ingress and through the OpenAI gateway over HTTP, every request answered in both, the
    gateway's CPU counted in the HTTP runs, and options that do not go together refused."""
    argv = ["bench", "control-plane", "--json", "--rates", "40", "--step-s", "2"]
    assert main([*argv, "--entry", "both"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (result["entry"], set(result["runs"])) == ("nats", {"nats", "http"})
    for entry in ("nats", "http"):
        [step] = result["runs"][entry][0]["steps"]
        assert step["requests"] > 0
        assert step["completed"] == step["requests"], (entry, step)
    assert result["runs"]["http"][0]["steps"][0]["cpu_cores_by_process"]["gateway"] > 0.0
    assert main([*argv, "--entry", "http", "--hops"]) == 2
    assert main([*argv, "--cells", "3"]) == 2
    assert "3 cells" in capsys.readouterr().err
