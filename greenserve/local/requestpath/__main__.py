"""``python -m greenserve.local.requestpath``: classifier, scheduler and router in one process."""

from greenserve.local.requestpath.service import NAME, serve
from shared.lifecycle import run_service

if __name__ == "__main__":
    run_service(NAME, serve)
