"""``greenserve bench engine-real``: The engine model against iterations measured on a real GPU.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
