"""``greenserve bench overload``: A multiple of the stack's capacity, over HTTP and NATS.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
