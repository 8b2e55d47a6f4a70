"""``greenserve bench engine-clock``: The engine's clock response beside DynamoLLM's and
throttLL'eM's measurements.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
