"""``python -m services.worker``: run one worker shim."""

from services.worker.service import NAME, serve
from shared.lifecycle import run_service

if __name__ == "__main__":
    run_service(NAME, serve)
