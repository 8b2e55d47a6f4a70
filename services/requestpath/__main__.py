"""``python -m services.requestpath``: run classifier, scheduler and router in one process."""

from services.requestpath.service import NAME, serve
from shared.lifecycle import run_service

if __name__ == "__main__":
    run_service(NAME, serve)
