"""Which processes carry the request path: one co-located process, or three."""

from __future__ import annotations

import argparse

import pytest

from greenserve.commands import up
from greenserve.commands._stack_args import spec_from_args
from greenserve.runner import run_in_process
from greenserve.stack import REQUEST_PATH_SERVICES, StackSpec, identity_for, stack_launches
from shared.security.identities import COMPOSITE_ROLES


def test_co_locating_replaces_classifier_scheduler_and_router_by_one_process() -> None:
    """Test that the co-located stack runs greenserve.local.requestpath instead of the three."""
    separate = {(x.name, x.module) for x in stack_launches(StackSpec())}
    colocated = {(x.name, x.module) for x in stack_launches(StackSpec(colocate_request_path=True))}
    assert separate - colocated == {
        ("classifier", "services.classifier"),
        ("scheduler", "services.scheduler"),
        ("router", "services.router"),
    }
    assert colocated - separate == {("requestpath", "greenserve.local.requestpath")}


@pytest.mark.parametrize(
    ("argv", "colocated"),
    [
        ([], True),
        (["--request-path", "separate"], False),
        (["--secure"], True),
        (["--secure", "--request-path", "separate"], False),
    ],
)
def test_up_co_locates_by_default_also_when_secured(argv: list[str], colocated: bool) -> None:
    """Test that --secure co-locates too (role requestpath), unless told separate."""
    parser = argparse.ArgumentParser()
    up.add_arguments(parser)
    assert spec_from_args(parser.parse_args(argv)).colocate_request_path is colocated


@pytest.mark.parametrize("colocate", [True, False])
def test_each_request_path_process_gets_the_identity_of_its_role(colocate: bool) -> None:
    """Test that the co-located process connects as role requestpath, the three as theirs."""
    launches = stack_launches(StackSpec(colocate_request_path=colocate))
    roles = {identity_for(x).role for x in launches}
    if colocate:
        assert "requestpath" in roles
        assert not roles & set(REQUEST_PATH_SERVICES)
    else:
        assert set(REQUEST_PATH_SERVICES) <= roles
        assert "requestpath" not in roles
    assert COMPOSITE_ROLES["requestpath"] == REQUEST_PATH_SERVICES


async def test_run_in_process_refuses_two_launches_of_one_name() -> None:
    """Test that two stacks' launches in one ``run_in_process`` call are refused before any
    starts: the second service of a name would hide the first, which would never be stopped."""
    launches = stack_launches(StackSpec(workers=1, regions=("PJM",)))
    with pytest.raises(ValueError, match="repeat"):
        async with run_in_process([*launches, *launches]):
            pass
