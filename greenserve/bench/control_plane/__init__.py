"""``greenserve bench control-plane``: How many requests per second the control plane sustains, and
where each spends its time.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
