"""The worker service: pure cores plus a thin asyncio shell (shim.py, run by service.py)."""
