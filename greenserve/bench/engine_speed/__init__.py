"""``greenserve bench engine-speed``: How fast the simulated engine steps.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
