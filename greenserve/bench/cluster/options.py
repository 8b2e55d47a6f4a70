"""Options of ``greenserve bench cluster``: :mod:`greenserve.bench.cluster.run`'s own.

That module imports the simulator inside its ``run`` only, so its options are light enough
for the CLI's parser as they are; this module names them where the CLI looks for options.
"""

from __future__ import annotations

from greenserve.bench.cluster.run import HELP, NAME, add_arguments

__all__ = ["HELP", "NAME", "add_arguments"]
