"""``greenserve bench dvfs``: MIAD, predictive and profile clock control against max clock, on one
simulated instance.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
