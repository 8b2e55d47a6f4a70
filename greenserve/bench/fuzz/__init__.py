"""``greenserve bench fuzz``: Generated bad input at every decoder and ingress.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
