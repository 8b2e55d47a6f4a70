"""``greenserve status`` and ``replay`` against a stack whose servers are gone."""

from __future__ import annotations

import argparse
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from greenserve.commands import _replay_run, _status_report, replay, status
from greenserve.local import STATE_FILE
from shared.servers import free_port


def _write_state(folder: Path) -> None:
    state = {
        "namespace": "t",
        "nats_url": f"nats://127.0.0.1:{free_port()}",
        "redis_url": f"redis://127.0.0.1:{free_port()}/0",
        "speedup": 1.0,
        "origin_wall_s": 0.0,
        "model": "llama-3-8b",
        "workers": 1,
        "pids": {"worker-0": os.getpid()},
        "server_pids": {},
    }
    (folder / STATE_FILE).write_text(json.dumps(state))


@pytest.mark.parametrize("as_json", [True, False])
def test_status_reports_an_unreachable_redis_instead_of_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    """Test both outputs: the processes still listed, the Redis error said in words, and
    the stack not called healthy (exit 1) though its processes are alive."""
    _write_state(tmp_path)
    code = status.run(argparse.Namespace(state_dir=tmp_path, json=as_json))
    out = capsys.readouterr().out
    assert code == 1
    if as_json:
        report = json.loads(out)
        assert (report["running"], report["healthy"]) == (True, False)
        assert report["processes"] == {"worker-0": True}
        assert report["error"].startswith("redis unreachable")
    else:
        assert "worker-0" in out
        assert "redis unreachable" in out


def test_replay_gives_up_on_a_stack_whose_nats_does_not_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test that the replay says the stack is unreachable and exits 1, instead of retrying
    the connection forever (what the services themselves do)."""
    _write_state(tmp_path)
    monkeypatch.setattr(_replay_run, "CONNECT_TIMEOUT_S", 0.5)
    args = argparse.Namespace(
        state_dir=tmp_path,
        synthetic_rate=2.0,
        duration=2.0,
        cv=1.0,
        trace="conv",
        start=0.0,
        max_requests=None,
        plots=None,
        out=None,
        json=False,
    )
    assert replay.run(args) == 1
    assert "did not answer within 0.5 s" in capsys.readouterr().err


@pytest.mark.parametrize("as_json", [True, False])
def test_status_without_a_stack_answers_json_when_asked_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    """Test ``status --json`` with no stack: one JSON object on stdout (a script parses it
    whatever the answer), nothing on stderr; without ``--json``, the line on stderr. Both
    exit 1, as for a stack with an exited process: 0 means a healthy stack."""
    code = status.run(argparse.Namespace(state_dir=tmp_path, json=as_json))
    captured = capsys.readouterr()
    assert code == 1
    if as_json:
        report = json.loads(captured.out)
        assert (report["running"], report["healthy"]) == (False, False)
        assert report["state_dir"] == str(tmp_path)
        assert report["error"].startswith("no running stack recorded in")
        assert captured.err == ""
    else:
        assert captured.out == ""
        assert captured.err.startswith("no running stack recorded in")


def _worker(worker_id: str, pool: str, region: str) -> dict[str, Any]:
    return {
        "worker_id": worker_id,
        "pool": pool,
        "region": region,
        "running": 12,
        "waiting": 130,
        "clock_mhz": 1410.0,
        "power_w": 312.5,
        "energy_wh": 1234.567,
    }


def _rendered(workers: list[dict[str, Any]], width: int = 80) -> str:
    report = {
        "running": True,
        "healthy": True,
        "namespace": "gs",
        "processes": {"requestpath": True, "dvfs-node-pjm": True, "gateway": False},
        "workers": workers,
        "plan": {
            "epoch": 3,
            "objective": "energy",
            "status": "optimal",
            "pools": [
                {
                    "pool": "ciso-h100-tp4-long",
                    "model": "llama-3-70b",
                    "gpu": "H100-80GB TP4",
                    "instances": 2,
                    "clock_cap_mhz": 1410.0,
                    "classes": "LS, LM, LL",
                }
            ],
        },
    }
    console = Console(width=width, record=True, file=io.StringIO())
    _status_report.print_report(console, report)
    return console.export_text()


def test_the_workers_table_shows_every_column_whole_at_80_columns() -> None:
    """Test the stack ``greenserve up`` starts: at 80 columns every worker id, pool, region,
    clock and energy is shown whole (they were all cut to "worker…", "ciso-a…", "1234.5…")."""
    workers = [_worker(f"worker-{i}", "ciso-a100", "CISO") for i in range(12)]
    text = _rendered(workers)
    assert "…" not in text
    for header in ("worker", "pool", "region", "run", "wait", "MHz", "W", "Wh"):
        assert header in text
    for i in range(12):
        assert f"worker-{i} " in text
    assert all(value in text for value in ("ciso-a100", "CISO", "1410", "312.5", "1234.567"))
    assert "exited" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_long_worker_ids_stay_whole_and_lower_value_columns_give_way() -> None:
    """Test ids of a real deployment: the ids and pools stay whole at 80 columns, the
    region (in the pool's name) and the energy (a running total) are left out first."""
    workers = [
        _worker("vllm-h100-node17-gpu3-replica-0007", "pjm-h100-llama-3-70b-tp4", "PJM"),
        _worker("worker-1", "ciso-a100", "CISO"),
    ]
    text = _rendered(workers)
    assert "…" not in text
    assert "vllm-h100-node17-gpu3-replica-0007" in text
    assert "pjm-h100-llama-3-70b-tp4" in text
    assert "1410" in text
    assert "region" not in text
    assert "1234.567" not in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_the_workers_table_keeps_every_column_where_there_is_room() -> None:
    """Test that a wide terminal drops nothing."""
    workers = [_worker("vllm-h100-node17-gpu3-replica-0007", "pjm-h100-llama-3-70b-tp4", "PJM")]
    text = _rendered(workers, width=160)
    assert all(value in text for value in ("region", "PJM", "312.5", "1234.567"))


def test_the_plan_summary_lists_the_pools_given_instances_with_their_clock_caps() -> None:
    """Test that the status/demo view of a plan names its objective and status, lists only
    the pools the plan gives instances (sorted), each with its model, GPU and TP, and a
    missing clock cap as the dvfs agent's own choice, and that the table shows them."""
    from proto.messages import Plan, PoolPlan

    pools = [
        PoolPlan(pool_id="pjm-h100-tp8", region="PJM", gpu="H100-80GB", tp=8, instances=1,
                 clock_mhz=None, classes=["LL"], model="llama-3-70b"),
        PoolPlan(pool_id="ciso-a100-tp4", region="CISO", gpu="A100-80GB", tp=4, instances=0),
        PoolPlan(pool_id="ciso-h100-tp4", region="CISO", gpu="H100-80GB", tp=4, instances=2,
                 clock_mhz=1200.0, classes=["SS", "SM"], model="llama-3-70b"),
    ]  # fmt: skip
    plan = Plan(epoch=4, issued_at=0.0, valid_until=1800.0, scheme="dynamollm9", pools=pools,
                routes={}, objective="energy", status="optimal")  # fmt: skip
    summary = _status_report.plan_summary(plan)
    assert (summary["epoch"], summary["objective"], summary["status"]) == (4, "energy", "optimal")
    assert [p["pool"] for p in summary["pools"]] == ["ciso-h100-tp4", "pjm-h100-tp8"]
    assert summary["pools"][0]["gpu"] == "H100-80GB TP4"
    assert summary["pools"][0]["classes"] == "SS, SM"
    assert summary["pools"][1]["clock_cap_mhz"] is None
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(_status_report.plan_table(summary))
    text = console.export_text()
    assert "plan epoch 4: energy (optimal)" in text
    assert "1200 MHz" in text
    assert "dvfs agent" in text
    assert "ciso-a100-tp4" not in text


def test_a_stack_without_a_plan_says_so() -> None:
    """Test the status view of a stack whose planner published nothing yet."""
    console = Console(width=80, record=True, file=io.StringIO())
    report: dict[str, Any] = {"namespace": "gs", "processes": {}, "workers": [], "plan": None}
    _status_report.print_report(console, report)
    assert "plan: none published yet" in console.export_text()
