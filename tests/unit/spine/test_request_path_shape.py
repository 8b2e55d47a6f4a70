"""Which processes carry the request path: one co-located process, or three."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from greenserve.commands import up
from greenserve.commands._stack_args import spec_from_args
from greenserve.local import start_local_stack
from greenserve.stack import StackSpec, stack_launches


def test_co_locating_replaces_classifier_scheduler_and_router_by_one_process() -> None:
    """Test that the co-located stack runs services.requestpath instead of the three."""
    separate = {(x.name, x.module) for x in stack_launches(StackSpec())}
    colocated = {(x.name, x.module) for x in stack_launches(StackSpec(colocate_request_path=True))}
    assert separate - colocated == {
        ("classifier", "services.classifier"),
        ("scheduler", "services.scheduler"),
        ("router", "services.router"),
    }
    assert colocated - separate == {("requestpath", "services.requestpath")}


@pytest.mark.parametrize(
    ("argv", "colocated"),
    [([], True), (["--request-path", "separate"], False), (["--secure"], False)],
)
def test_up_co_locates_by_default_but_not_when_secured(argv: list[str], colocated: bool) -> None:
    """Test that --secure keeps one identity per service (no co-located role exists)."""
    parser = argparse.ArgumentParser()
    up.add_arguments(parser)
    assert spec_from_args(parser.parse_args(argv)).colocate_request_path is colocated


def test_a_secured_stack_refuses_the_co_located_request_path(tmp_path: Path) -> None:
    """Test that asking for both fails before anything starts."""
    with pytest.raises(ValueError, match="co-located"):
        start_local_stack(StackSpec(colocate_request_path=True), tmp_path, secure=True)
