"""``greenserve bench cluster``: A policy against the papers' peak-sized baselines, in the offline
simulator.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
