"""``greenserve bench planner-scale``: How long one epoch plan takes to solve.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
