"""Trace replay against a running stack, and the offline cluster simulator."""
