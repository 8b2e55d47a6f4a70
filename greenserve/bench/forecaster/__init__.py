"""``greenserve bench forecaster``: Rolling-origin backtest of the carbon forecaster.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
