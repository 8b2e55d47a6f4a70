"""``greenserve bench e2e``: Requests of the conversation trace through the whole live stack.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
