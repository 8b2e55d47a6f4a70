"""``greenserve bench engine-accuracy``: The engine model's error on held-out calibration points.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
