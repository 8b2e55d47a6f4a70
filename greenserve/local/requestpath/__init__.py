"""The co-located request path: classifier, scheduler and router in one process.

A launcher, not a service: it composes the three services' shells (their public
``SchedulerShell``, ``RouterShell`` and the classifier's core), which no service may do,
since services import only ``shared/`` and ``proto/``.
"""
