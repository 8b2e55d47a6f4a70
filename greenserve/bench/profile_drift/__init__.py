"""``greenserve bench profile-drift``: DynamoLLM's instance manager when the served mix changes.

Empty on purpose: the CLI imports ``options`` to build its parser, and ``run`` only when the
benchmark runs.
"""
