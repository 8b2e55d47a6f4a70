"""The co-located request path: classifier, scheduler and router in one process."""
