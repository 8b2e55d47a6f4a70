"""The sections of :class:`shared.config.Settings`, one module per area of the stack.

Import them from :mod:`shared.config`, which assembles them into one ``Settings`` and loads it.
"""

__all__: list[str] = []
