"""``greenserve bench cli-help``: How fast the CLI answers ``--help``.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
