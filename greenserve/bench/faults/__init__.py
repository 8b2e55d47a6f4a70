"""``greenserve bench faults``: Kill or restart every part during a replay; count what is lost.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
