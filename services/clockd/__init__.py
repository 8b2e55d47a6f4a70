"""The clock agent: the one privileged process of a node that locks GPU clocks.

See ``docs/gpu-clocks.md``.
"""
