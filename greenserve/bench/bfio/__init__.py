"""``greenserve bench bfio``: BF-IO placement against FCFS on a simulated decode pool, and its MILP
optimality gap.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
