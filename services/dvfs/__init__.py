"""The dvfs service: pure cores plus a thin asyncio shell (service.py, __main__.py)."""
