"""``greenserve bench sim-speed``: Wall time of the offline simulator on the 1-h conversation
trace.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
