"""The classifier service: pure cores plus a thin asyncio shell (service.py, classify_message.py,
handoff.py, __main__.py)."""
