"""A fake node's GPUs (``tests.fake_pynvml``) for the clock tests, in a per-test state file."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import fake_pynvml


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two A100s, privileged; the fake reads this state file (returned)."""
    path = tmp_path / "gpus.json"
    fake_pynvml.write_state(path, [fake_pynvml.a100(), fake_pynvml.a100()])
    monkeypatch.setenv(fake_pynvml.STATE_ENV, str(path))
    return path


@pytest.fixture
def socket_path() -> Iterator[Path]:
    """A short socket path (Unix socket paths are limited to about 100 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="clk", dir="/tmp"))
    try:
        yield folder / "clockd.sock"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
