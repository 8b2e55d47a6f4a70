"""Where reference data lives.

The data directory is a setting (``GREENSERVE_DATA_DIR``); its default is the public data
folder that sits beside a checkout (``<repo>/../shared/data``), which is where tests and CI
find it. Data is read from there and never copied into the repository.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = ["DATA_DIR_ENV", "REPO_ROOT", "DataDirError", "data_dir", "data_path"]

DATA_DIR_ENV: Final = "GREENSERVE_DATA_DIR"
"""Environment variable naming the reference-data directory."""

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
"""Root of the source checkout (the folder holding ``pyproject.toml``)."""


class DataDirError(FileNotFoundError):
    """The reference-data directory or a file in it is missing."""


def data_dir() -> Path:
    """Return the reference-data directory, checking that it exists.

    Raises:
        DataDirError: when neither the setting nor the default location exists.
    """
    configured = os.environ.get(DATA_DIR_ENV)
    path = Path(configured) if configured else REPO_ROOT.parent / "shared" / "data"
    if not path.is_dir():
        raise DataDirError(
            f"reference data not found at {path}; set {DATA_DIR_ENV} to the folder that holds "
            "traces/, carbon/, carbon_em/, freesh/ and calibration/"
        )
    return path


def data_path(*parts: str) -> Path:
    """Return a file under the data directory, raising a clear error when it is missing."""
    path = data_dir().joinpath(*parts)
    if not path.exists():
        raise DataDirError(f"reference data file missing: {path}")
    return path
