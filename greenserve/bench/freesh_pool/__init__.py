"""``greenserve bench freesh-pool``: FREESH's one-day pool-level planning study.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
