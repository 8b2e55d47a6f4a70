"""A fake node's GPUs (``tests.fake_pynvml``) for the clock tests, in a per-test state file."""

from __future__ import annotations

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
