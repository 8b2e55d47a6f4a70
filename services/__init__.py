"""One package per GreenServe service: a pure core plus a thin asyncio shell."""
