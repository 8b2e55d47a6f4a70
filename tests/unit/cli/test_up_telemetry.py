"""``greenserve up``'s observability options: metrics ports, the file-SD file, OTLP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from greenserve.cli import build_parser
from greenserve.local.metrics_targets import (
    TARGETS_FILE,
    metrics_urls,
    with_metrics_ports,
    write_targets,
)
from greenserve.stack import StackSpec, stack_launches


def test_every_process_gets_its_own_metrics_port_unless_its_settings_name_one() -> None:
    """Test that each launch without a port gets a distinct one and a fixed one is kept."""
    spec = StackSpec(workers=2, extra={"telemetry": {"metrics_port": None}})
    launches = with_metrics_ports(stack_launches(spec))
    ports = [launch.settings.telemetry.metrics_port for launch in launches]
    assert None not in ports
    assert len(set(ports)) == len(launches)
    fixed = stack_launches(StackSpec(workers=1, extra={"telemetry": {"metrics_port": 9464}}))
    assert {launch.settings.telemetry.metrics_port for launch in with_metrics_ports(fixed)} == {
        9464
    }


def test_the_targets_file_has_one_labelled_group_per_process(tmp_path: Path) -> None:
    """Test the file-SD shape Prometheus reads: a list of {targets, labels}, host:port."""
    launches = with_metrics_ports(stack_launches(StackSpec(workers=2, namespace="ns")))
    path = write_targets(tmp_path, launches, "ns")
    assert path == tmp_path / TARGETS_FILE
    groups = json.loads(path.read_text())
    urls = metrics_urls(launches)
    assert [g["labels"]["process"] for g in groups] == [launch.name for launch in launches]
    for group in groups:
        (target,) = group["targets"]
        assert urls[group["labels"]["process"]] == f"http://{target}/metrics"
        assert group["labels"]["job"] == "greenserve"
        assert group["labels"]["namespace"] == "ns"
    assert {g["labels"]["service"] for g in groups} == {
        "scheduler",
        "router",
        "classifier",
        "planner",
        "forecaster",
        "gateway",
        "dvfs",
        "worker",
    }


def test_up_takes_an_otlp_endpoint_and_refuses_what_is_not_http(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser, _ = build_parser()
    args = parser.parse_args(["up", "--otlp-endpoint", "http://127.0.0.1:4318"])
    assert args.otlp_endpoint == "http://127.0.0.1:4318"
    assert parser.parse_args(["up"]).otlp_endpoint is None
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["up", "--otlp-endpoint", "127.0.0.1:4318"])
    assert exited.value.code == 2
    assert "not an http(s) URL" in capsys.readouterr().err
