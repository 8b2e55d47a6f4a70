"""``greenserve status`` against a stack whose Redis is gone."""

from __future__ import annotations

import argparse
import json
import os
import socket
from pathlib import Path

import pytest

from greenserve.commands import status
from greenserve.local import STATE_FILE


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize("as_json", [True, False])
def test_status_reports_an_unreachable_redis_instead_of_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    """Test both outputs: the processes still listed, the Redis error said in words."""
    state = {
        "namespace": "t",
        "nats_url": "nats://127.0.0.1:1",
        "redis_url": f"redis://127.0.0.1:{_closed_port()}/0",
        "speedup": 1.0,
        "origin_wall_s": 0.0,
        "model": "llama-3-8b",
        "workers": 1,
        "pids": {"worker-0": os.getpid()},
        "server_pids": {},
    }
    (tmp_path / STATE_FILE).write_text(json.dumps(state))
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
