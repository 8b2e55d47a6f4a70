"""Outside programs a test needs, found on PATH.

A test that needs one skips where it is missing, so ``make test`` passes on a machine
without it; ``.ci/run`` installs them and sets ``GREENSERVE_REQUIRE_TOOLS`` so that a
missing one fails there instead of turning a check into a skip that nobody sees.
"""

from __future__ import annotations

import os
import shutil

import pytest

REQUIRE_ENV = "GREENSERVE_REQUIRE_TOOLS"


def required_tools() -> frozenset[str]:
    """The programs named (comma-separated) in ``GREENSERVE_REQUIRE_TOOLS``."""
    listed = os.environ.get(REQUIRE_ENV, "")
    return frozenset(name.strip() for name in listed.split(",") if name.strip())


def tool(name: str, package: str) -> str:
    """The path of program ``name``; skip the test where it is missing, or fail it where
    ``GREENSERVE_REQUIRE_TOOLS`` names it. ``package`` is the Debian package to install."""
    found = shutil.which(name)
    if found is not None:
        return found
    why = f"{name} is not installed (Debian package {package!r})"
    if name in required_tools():
        pytest.fail(f"{why}, and {REQUIRE_ENV} requires it")
    pytest.skip(why)
