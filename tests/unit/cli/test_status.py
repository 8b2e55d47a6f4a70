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
        "plan": {"epoch": 3, "pools": 3, "objective": 1.5},
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
