"""``greenserve status`` and ``replay`` against a stack whose servers are gone."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from greenserve.commands import _replay_run, replay, status
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
    """Test both outputs: the processes still listed, the Redis error said in words."""
    _write_state(tmp_path)
    code = status.run(argparse.Namespace(state_dir=tmp_path, json=as_json))
    out = capsys.readouterr().out
    assert code == 0
    if as_json:
        report = json.loads(out)
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
