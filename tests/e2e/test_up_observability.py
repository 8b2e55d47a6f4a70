"""``greenserve up`` puts every process on a metrics port, and each one passes promtool.

The stack is started as an operator starts it (the CLI's ``up``); every ``/metrics`` URL it
prints, records and lists in ``status`` and in its Prometheus file-SD file is scraped after
a completion, and each exposition goes through ``promtool check metrics`` (Debian's
``prometheus`` package), which fails on malformed text and on lint problems alike.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
import uuid
from pathlib import Path

import pytest

from greenserve.cli import main
from greenserve.local import load_state
from tests.external_tools import tool

pytestmark = pytest.mark.connected


def _complete(url: str) -> int:
    body = {"model": "llama-3-8b", "prompt": "hello", "max_tokens": 3}
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        tokens: int = json.load(response)["usage"]["completion_tokens"]
    return tokens


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text: str = response.read().decode()
    return text


def test_up_serves_metrics_from_every_process_and_each_passes_promtool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Test that ``up`` gives every service process a metrics port, prints each URL and the
    file-SD file, records them for ``status``, writes a targets file that names exactly
    them, and that each scrape passes ``promtool check metrics`` with no finding."""
    promtool = tool("promtool", "prometheus")
    state_dir = tmp_path / "gs"
    namespace = f"obs{uuid.uuid4().hex[:6]}"
    argv = ["--workers", "2", "--regions", "PJM", "--speedup", "20", "--request-path"]
    argv += ["separate", "--namespace", namespace, "--state-dir", str(state_dir)]
    assert main(["up", *argv]) == 0
    try:
        printed = capsys.readouterr().err
        state = load_state(state_dir)
        assert set(state.metrics) == set(state.pids)  # every service process, no server
        assert len(set(state.metrics.values())) == len(state.pids)  # one port each
        for name, url in state.metrics.items():
            assert re.search(rf"^\s+{re.escape(name)}\s+{re.escape(url)}$", printed, re.M)
        assert state.metrics_targets_file is not None
        assert state.metrics_targets_file in printed
        groups = json.loads(Path(state.metrics_targets_file).read_text())
        listed = {g["labels"]["process"]: g["targets"] for g in groups}
        assert listed == {
            name: [url.removeprefix("http://").removesuffix("/metrics")]
            for name, url in state.metrics.items()
        }
        assert {g["labels"]["namespace"] for g in groups} == {namespace}
        assert {g["labels"]["service"] for g in groups} >= {"gateway", "worker", "dvfs"}

        assert main(["status", "--json", "--state-dir", str(state_dir)]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["metrics"] == state.metrics
        assert report["metrics_targets_file"] == state.metrics_targets_file

        assert state.gateway_url is not None
        assert _complete(f"{state.gateway_url}/v1/completions") == 3
        for name, url in state.metrics.items():
            text = _scrape(url)
            assert "greenserve_" in text, name
            checked = subprocess.run(
                [promtool, "check", "metrics"],
                input=text,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            findings = (checked.stdout + checked.stderr).strip()
            assert checked.returncode == 0, f"{name} ({url}): {findings}"
            assert not findings, f"{name} ({url}): {findings}"
        # The request's own figures reach the gateway's scrape, the worker's its latency.
        assert "greenserve_http_requests_total" in _scrape(state.metrics["gateway"])
        workers = [_scrape(url) for name, url in state.metrics.items() if "worker" in name]
        assert any("greenserve_request_latency_seconds_count{" in text for text in workers)
    finally:
        assert main(["down", "--state-dir", str(state_dir)]) == 0
