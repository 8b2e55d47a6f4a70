"""``greenserve bench predictor``: Output-length predictor accuracy on held-out Azure traces.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
