"""``python -m services.router``: run the router service."""

from services.router.service import NAME, serve
from shared.lifecycle import run_service

if __name__ == "__main__":
    run_service(NAME, serve)
