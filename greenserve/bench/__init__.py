"""Benchmarks: one `greenserve bench <name>` command each, one folder per subject.

Each folder (``greenserve/bench/dvfs/``, ``greenserve/bench/control_plane/``...) is a package
holding one benchmark:

- ``options.py`` says what the command is: ``NAME: str`` (the command name,
  ``"engine-accuracy"``), ``HELP: str`` (one line for ``--help``) and
  ``add_arguments(parser)``. It imports nothing heavier than ``argparse`` and
  :mod:`greenserve.argtypes`, because the CLI imports every one of them to build its parser;
  the package's ``__init__.py`` stays empty for the same reason.
- ``run.py`` does the work: ``run(args: argparse.Namespace) -> dict[str, Any]``. It may
  import numpy, scikit-learn or a whole stack, and is imported only when its benchmark runs.
- the rest of the folder is what only that benchmark uses (its scenarios, plots, paper
  figures, evaluation harness), named for what it does and not after the code it measures.

The CLI prints human-readable progress on stderr and, with ``--json``, the result as one
JSON object on the last line of stdout. Discovery by folder keeps benchmarks independent:
adding one adds its folder and never edits a shared registry file.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

__all__ = ["Bench", "discover"]


@dataclass(frozen=True, slots=True)
class Bench:
    """One benchmark as the CLI sees it, before its work module is imported."""

    name: str
    """The command name (``greenserve bench <name>``)."""
    help: str
    """One line for ``--help``."""
    add_arguments: Callable[[argparse.ArgumentParser], None]
    """Adds the benchmark's options (from its light options module)."""
    module: str
    """Dotted name of the module whose ``run(args)`` does the work."""

    def load(self) -> ModuleType:
        """Import the work module (numpy, scikit-learn or a stack with it); its ``run(args)``
        returns the result as one JSON-serialisable dict."""
        return importlib.import_module(self.module)


def discover() -> dict[str, Bench]:
    """Return every benchmark, keyed by its command name, importing only options modules."""
    found: dict[str, Bench] = {}
    for info in pkgutil.iter_modules(__path__):
        if not info.ispkg or info.name.startswith("_"):
            continue
        package = f"{__name__}.{info.name}"
        spec = importlib.import_module(f"{package}.options")
        found[spec.NAME] = Bench(
            name=spec.NAME,
            help=spec.HELP,
            add_arguments=spec.add_arguments,
            module=f"{package}.run",
        )
    return found
