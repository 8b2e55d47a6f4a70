"""``greenserve bench llf``: Queueing policies in FREESH's Table 5 setting, on a tick simulator.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
