"""``python -m services.scheduler``: run the scheduler service."""

from services.scheduler.service import NAME, serve
from shared.lifecycle import run_service

if __name__ == "__main__":
    run_service(NAME, serve)
